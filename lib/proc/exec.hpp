// Replacing this process with the program: the last step of the Slurm path, so that nothing
// stays between slurmstepd and the program and Slurm's signals reach it directly. Local mode's
// workers (proc/spawn.cpp) exec through the same argument arrays.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch::proc {

// The NULL-terminated argv and envp that execve takes, owning their strings; built before a
// fork or clone, since the child may not allocate.
class ExecArguments {
 public:
  ExecArguments(const std::vector<std::string>& argv, const core::EnvMap& env);
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
                               const std::vector<std::string>& argv, const core::EnvMap& env);

struct WorkerProcess;  // proc/supervisor.hpp

// The Slurm path's last step: `worker`'s --cpu-bind/--mem-bind applied to this process (both
// survive execve, so the program's first thread and allocation land right), then exec_program.
// Throws as exec_program does, or Error::system when the kernel refuses the binding.
[[noreturn]] void exec_worker(const WorkerProcess& worker);

// What execve(program_path, argv, env) would do, without running any of the program: a child
// asks to be traced and execs; the kernel stops it before the program's first instruction
// (then it is killed) or execve fails (its errno comes back). The very system call the launch
// makes, with its arguments, so E2BIG, a missing #! interpreter or a file of no known format
// are found exactly as the launch would meet them. Returns 0 when the kernel accepts the
// program, execve's errno when not, and nullopt when it cannot tell (tracing is not allowed
// here: a seccomp filter, Yama's ptrace_scope 3).
std::optional<int> trial_exec(const std::string& program_path, const std::vector<std::string>& argv,
                              const core::EnvMap& env);

}  // namespace dtlaunch::proc
