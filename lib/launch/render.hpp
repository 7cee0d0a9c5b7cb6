// --dry-run output: the exact environment changes and argv that would be exec'd.
#pragma once

#include <string>
#include <vector>

#include "launch/plan.hpp"

namespace dtlaunch::launch {

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
