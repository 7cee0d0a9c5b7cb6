// The last step of the Slurm path: replace dtlaunch with the program, so that nothing stays
// between slurmstepd and the program and Slurm's signals reach it directly.
#pragma once

#include <string>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch {

// execve(program_path, argv, env). Returns only by throwing core/exec_error.hpp's Error: 127
// for a program that is not there, 126 for every other exec failure.
[[noreturn]] void exec_program(const std::string& program_path,
                               const std::vector<std::string>& argv, const EnvMap& env);

}  // namespace dtlaunch
