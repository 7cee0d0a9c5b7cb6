#include "proc/exec.hpp"

#include <unistd.h>

#include <cerrno>

#include "core/exec_error.hpp"

namespace dtlaunch {

namespace {

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

ExecArguments::ExecArguments(const std::vector<std::string>& argv, const EnvMap& env)
    : argv_strings_(argv),
      env_strings_(env.to_strings()),
      argv_(pointers_to(argv_strings_)),
      envp_(pointers_to(env_strings_)) {}

void exec_program(const std::string& program_path, const std::vector<std::string>& argv,
                  const EnvMap& env) {
  const ExecArguments arguments(argv, env);
  ::execve(program_path.c_str(), arguments.argv(), arguments.envp());
  // Local mode's workers fail through the same mapping (proc/spawn.cpp).
  throw exec_error(program_path, errno);
}

}  // namespace dtlaunch
