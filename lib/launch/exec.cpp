#include "launch/exec.hpp"

#include <unistd.h>

#include <cerrno>

#include "core/exec_error.hpp"

namespace dtlaunch {

void exec_program(const std::string& program_path, const std::vector<std::string>& argv,
                  const EnvMap& env) {
  std::vector<std::string> env_strings = env.to_strings();
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> argv_copy = argv;
  std::vector<char*> argvp;
  argvp.reserve(argv_copy.size() + 1);
  for (std::string& s : argv_copy) argvp.push_back(s.data());
  argvp.push_back(nullptr);

  ::execve(program_path.c_str(), argvp.data(), envp.data());
  // Local mode's workers fail through the same mapping (proc/spawn.cpp).
  throw exec_error(program_path, errno);
}

}  // namespace dtlaunch
