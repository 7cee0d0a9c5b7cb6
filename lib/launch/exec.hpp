// The last step of the Slurm path: replace dtlaunch with the program, so that nothing stays
// between slurmstepd and the program and Slurm's signals reach it directly.
#pragma once

#include <string>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch {

// execve(program_path, argv, env). Returns only by throwing: Error with 127 (ENOENT), 126 (not
// executable) or 1 (anything else).
[[noreturn]] void exec_program(const std::string& program_path,
                               const std::vector<std::string>& argv, const EnvMap& env);

}  // namespace dtlaunch
