// From what the user and the environment say to a validated LaunchSpec, for both modes.
// All checks happen here; on success, exec or spawn has nothing left to decide.
#pragma once

#include <cstdint>
#include <functional>

#include "core/env_map.hpp"
#include "launch/options.hpp"
#include "launch/slurm_step.hpp"
#include "launch/spec.hpp"
#include "launch/system.hpp"

namespace dtlaunch {

// Chooses the Slurm path or the local mode from --mode, --nproc-per-node and the environment,
// and refuses contradictions (--nproc-per-node inside a multi-task step would start N x M
// workers). Never returns kAuto.
Mode resolve_mode(const LaunchOptions& options, const EnvMap& env);

// Under srun: this task's own launch. Every task computes the same master and port.
LaunchSpec spec_from_slurm(const SlurmStep& step, const LaunchOptions& options, const EnvMap& env,
                           const System& system);

// Local mode: nproc_per_node workers on this node. Inside an srun step with one task per node,
// the nodes, node rank and master come from Slurm (`srun --ntasks-per-node=1 dtlaunch
// --nproc-per-node 8`); otherwise from --nnodes/--node-rank/--master-addr/--master-port.
// find_free_port is called only for a standalone launch with no port given.
LaunchSpec spec_from_local(const LaunchOptions& options, const EnvMap& env, const System& system,
                           const std::function<std::uint16_t()>& find_free_port);

// Which GPU of `topology` each local rank's device is (choose_device, then find_gpu), or nullopt
// where it cannot be located (MIG, or indices under a CUDA_DEVICE_ORDER other than PCI_BUS_ID);
// `unlocated`, when given and empty, names the first such device.
std::vector<std::optional<std::size_t>> locate_gpus(const LaunchSpec& spec, const EnvMap& env,
                                                    const Topology& topology,
                                                    std::string* unlocated = nullptr);

}  // namespace dtlaunch
