// Replacing this process with the program: the last step of the Slurm path, so that nothing
// stays between slurmstepd and the program and Slurm's signals reach it directly. Local mode's
// workers (proc/spawn.cpp) exec through the same argument arrays.
#pragma once

#include <string>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch {

// The NULL-terminated argv and envp that execve takes, owning their strings; built before a
// fork or clone, since the child may not allocate.
class ExecArguments {
 public:
  ExecArguments(const std::vector<std::string>& argv, const EnvMap& env);
  ExecArguments(const ExecArguments&) = delete;
  ExecArguments& operator=(const ExecArguments&) = delete;
  char* const* argv() const noexcept { return argv_.data(); }
  char* const* envp() const noexcept { return envp_.data(); }

 private:
  std::vector<std::string> argv_strings_, env_strings_;
  std::vector<char*> argv_, envp_;
};

// execve(program_path, argv, env). Returns only by throwing core/exec_error.hpp's Error: 127
// for a program that is not there, 126 for every other exec failure.
[[noreturn]] void exec_program(const std::string& program_path,
                               const std::vector<std::string>& argv, const EnvMap& env);

}  // namespace dtlaunch
