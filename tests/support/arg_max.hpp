// Building an execve that is just too big (E2BIG) for the program a launcher starts, while the
// launcher's own execve still fits, for the tests of both modes. Header-only: the black-box
// tests do not link the test support library.
#pragma once

#include <string>
#include <vector>

namespace dtlaunch_test {

// The stack limit under which the kernel allows exactly ARG_MAX (128 KiB) for the filename,
// the argv and environment strings (with their NULs) and their pointers: at most 512 KiB
// gives max(rlimit / 4, ARG_MAX). Run the launcher as `prlimit --stack=kSmallStack LAUNCHER`.
inline constexpr const char* kSmallStack = "--stack=262144";
inline constexpr std::size_t kArgMax = 131072;

// The argument that, appended to argv, leaves `slack` bytes of that limit for an execve of
// `filename` with argv and env: the launcher starts, and a program that gets more than
// `slack` bytes of environment from it cannot be started.
inline std::string arg_max_padding(const std::string& filename,
                                   const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env, std::size_t slack) {
  std::size_t used = filename.size() + 1 + (argv.size() + 1 + env.size()) * sizeof(void*);
  for (const std::string& a : argv) used += a.size() + 1;
  for (const std::string& e : env) used += e.size() + 1;
  return std::string(kArgMax - used - slack - 1, 'x');
}

}  // namespace dtlaunch_test
