// THE function that decides a worker's environment, for the Slurm path and the local mode
// alike. Pure: a value in, a value out; only exec/spawn apply it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "launch/spec.hpp"

namespace dtlaunch {

struct EnvChange {
  std::string name;
  std::optional<std::string> value;  // nullopt: remove the inherited variable
  bool operator==(const EnvChange&) const = default;
};
using EnvDelta = std::vector<EnvChange>;

// The changes to make to `inherited` for this worker, in the order of the contract table
// (launch/contract.hpp), removals last. Throws Error only if the GPU plan cannot serve
// worker.local_rank, which check_gpu_plan already rules out for a spec built by lib/.
EnvDelta build_worker_env(const LaunchSpec& spec, const WorkerInfo& worker,
                          const EnvMap& inherited);

EnvMap apply_env(EnvMap inherited, const EnvDelta& delta);

}  // namespace dtlaunch
