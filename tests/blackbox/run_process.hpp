// Runs a program as a real child process with exactly the given environment and collects what
// it printed and how it ended, within a time limit.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch_test {

struct ProcessResult {
  int pid = 0;
  int exit_status = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
};

// Throws std::runtime_error, after SIGKILLing the child, when it has not ended and closed its
// output within `timeout`: a hung launcher fails its test instead of the whole suite's run.
ProcessResult run_process(const std::vector<std::string>& argv, const dtlaunch::core::EnvMap& env,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A test child's report (printenv_child's environment, affinity_child's bindings): its
// "NAME=value" lines by name, grouped by the worker that printed them, the R of a local-mode
// worker's "[rank R] " prefix; the lines of a program dtlaunch exec'd, unprefixed, are rank 0's.
// Other lines are skipped.
using ChildValues = std::map<std::string, std::string>;
std::map<int, ChildValues> child_values_by_rank(const std::string& out);

}  // namespace dtlaunch_test
