// Runs a program as a real child process with exactly the given environment and collects what
// it printed and how it ended.
#pragma once

#include <string>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch::test {

struct ProcessResult {
  int pid = 0;
  int exit_status = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
};

ProcessResult run_process(const std::vector<std::string>& argv, const EnvMap& env);

}  // namespace dtlaunch::test
