// --dry-run output: the exact environment changes and argv that would be exec'd.
#pragma once

#include <string>
#include <vector>

#include "launch/worker_env.hpp"

namespace dtlaunch::launch {

struct PlannedWorker {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  contract::EnvDelta changes;                // to_env(contract, the inherited environment)
  std::optional<affinity::Binding> binding;  // --cpu-bind / --mem-bind, when on
  contract::WorkerContract contract;  // what the worker is told (worker_contract), for the doctor
};

// Shell: "export NAME='value'" / "unset NAME" lines, then "exec 'prog' 'arg'...". Pasting it into
// a shell reproduces the launch. Several workers (local mode) are separated by "# rank N" lines.
// A binding is a "# cpus 0-3,8-11 mems preferred:0" comment line before the worker's exports.
std::string render_shell(const std::vector<PlannedWorker>& workers,
                         const std::vector<std::string>& argv);

// JSON: {"argv": [...], "workers": [{"rank": R, "local_rank": L, "set": {...}, "unset": [...]}]},
// and with a binding "cpus": "0-3,8-11", "mems": "0", "mem_policy": "preferred" in each worker.
std::string render_json(const std::vector<PlannedWorker>& workers,
                        const std::vector<std::string>& argv);

std::string shell_quote(const std::string& text);

}  // namespace dtlaunch::launch
