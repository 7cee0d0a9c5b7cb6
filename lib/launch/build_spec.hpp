// From what the user and the environment say to a validated LaunchSpec, for both modes.
// All checks happen here; on success, exec or spawn has nothing left to decide.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/inputs.hpp"
#include "launch/options.hpp"
#include "launch/spec.hpp"
#include "launch/system.hpp"

namespace dtlaunch::launch {

// Under srun: this task's own launch, from inputs read in Mode::kSlurm. Every task computes the
// same master and port.
LaunchSpec spec_from_slurm(const LaunchInputs& in, const LaunchOptions& options,
                           const System& system);

// Local mode: nproc_per_node workers on this node. Inside an srun step with one task per node,
// the nodes, node rank and master come from Slurm (`srun --ntasks-per-node=1 dtlaunch
// --nproc-per-node 8`); otherwise from --nnodes/--node-rank/--master-addr/--master-port.
// system.free_port is asked only for a standalone launch with no port given, once everything
// else is known to be valid.
LaunchSpec spec_from_local(const LaunchInputs& in, const LaunchOptions& options,
                           const System& system);

// Which GPU of `topology` each local rank's device is (choose_device, then find_gpu), or nullopt
// where it cannot be located (MIG, or indices under a CUDA_DEVICE_ORDER other than PCI_BUS_ID);
// `unlocated`, when given and empty, names the first such device.
std::vector<std::optional<std::size_t>> locate_gpus(const LaunchSpec& spec, const LaunchInputs& in,
                                                    const affinity::Topology& topology,
                                                    std::string* unlocated = nullptr);

}  // namespace dtlaunch::launch
