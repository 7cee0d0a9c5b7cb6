#include "launch/exec.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

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
  const int error = errno;
  if (error == ENOENT || error == ENOTDIR)
    throw Error(ExitCode::kNotFound, program_path + ": no such file");
  if (error == EACCES || error == ENOEXEC || error == EPERM || error == EISDIR)
    throw Error(ExitCode::kNotExecutable,
                program_path + ": cannot execute: " + std::strerror(error));
  throw Error::system("exec " + program_path, error);
}

}  // namespace dtlaunch
