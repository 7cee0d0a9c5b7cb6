// The one table of the variables dtlaunch exports to a worker: the builder (worker_env.cpp)
// writes exactly these, `--dry-run` prints them in this order, and docs/environment.md is
// generated from it (`dtlaunch env-table`; a test keeps the committed page in sync).
#pragma once

#include <span>
#include <string_view>

namespace dtlaunch {

struct ExportedVar {
  std::string_view name;
  std::string_view meaning;
  std::string_view source;  // where the value comes from, under Slurm and in local mode
};

std::span<const ExportedVar> exported_vars();

// Local mode: names the dtlaunch that supervises a worker (LaunchSpec::supervisor_tag).
inline constexpr std::string_view kSupervisorVar = "DTLAUNCH_SUPERVISOR";

// Inherited variables that are removed from a worker's environment, with the reason.
struct RemovedVar {
  std::string_view name;
  std::string_view why;
};
std::span<const RemovedVar> removed_vars();

}  // namespace dtlaunch
