// THE function that decides a worker's environment, for the Slurm path and the local mode
// alike: the spec and the worker give the contract (contract/contract.hpp), the contract gives
// the variables. Pure: a value in, a value out; only exec/spawn apply it.
#pragma once

#include "contract/contract.hpp"
#include "core/env_map.hpp"
#include "launch/spec.hpp"

namespace dtlaunch::launch {

// What this worker is told. Throws Error only if the GPU plan cannot serve worker.local_rank,
// which check_gpu_plan already rules out for a spec built by lib/.
contract::WorkerContract worker_contract(const LaunchSpec& spec, const WorkerInfo& worker);

// to_env(worker_contract(spec, worker), inherited): the changes, in the order of the table.
contract::EnvDelta build_worker_env(const LaunchSpec& spec, const WorkerInfo& worker,
                                    const core::EnvMap& inherited);

}  // namespace dtlaunch::launch
