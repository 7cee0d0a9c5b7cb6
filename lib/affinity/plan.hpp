// Which CPUs and which memory policy a rank gets: pure functions from a Topology, the rank's
// GPU and the mask the task inherited (Slurm's cgroup or srun --cpu-bind, taskset) to a
// Binding. Applying it is affinity/apply.hpp's job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "affinity/cpuset.hpp"
#include "affinity/topology.hpp"
#include "core/names.hpp"

namespace dtlaunch::affinity {

enum class CpuBind {
  kNone,       // leave the inherited mask alone
  kNuma,       // the NUMA node of the rank's GPU
  kSocket,     // the package of the rank's GPU
  kExclusive,  // a share of the physical cores (with their hyperthreads) no other rank gets
  kCache,      // the CPUs under one last-level cache (an AMD core complex)
};
enum class MemBind { kNone, kLocal, kStrict };
enum class MemPolicy { kNone, kPreferred, kPreferredMany, kBind };

// The options' words (--cpu-bind, --mem-bind and their variables), one table per enum.
inline constexpr core::Named<CpuBind> kCpuBindNames[] = {{CpuBind::kNone, "none"},
                                                         {CpuBind::kNuma, "numa"},
                                                         {CpuBind::kSocket, "socket"},
                                                         {CpuBind::kExclusive, "exclusive"},
                                                         {CpuBind::kCache, "cache"}};
inline constexpr core::Named<MemBind> kMemBindNames[] = {
    {MemBind::kNone, "none"}, {MemBind::kLocal, "local"}, {MemBind::kStrict, "strict"}};

// Parse the option's words; nullopt for anything else.
std::optional<CpuBind> parse_cpu_bind(std::string_view text);
std::optional<MemBind> parse_mem_bind(std::string_view text);
std::string_view to_string(CpuBind bind);
std::string_view to_string(MemBind bind);
// "preferred", "preferred-many", "bind", "none": what /proc/PID/numa_maps calls the policy.
std::string_view to_string(MemPolicy policy);

struct AffinityRequest {
  CpuBind cpu = CpuBind::kNone;
  MemBind mem = MemBind::kNone;
  std::uint32_t rank = 0;  // for messages
  std::uint32_t local_rank = 0;
  // The GPU of every local rank, as an index into Topology::gpus; nullopt when a rank has none
  // or it could not be located. Binding follows the GPUs only when every rank's is known;
  // otherwise the ranks are spread over the node, as for CPU training. Its size is the
  // number of local ranks.
  std::vector<std::optional<std::size_t>> gpu_of_local_rank;
  CpuSet task_cpus;  // the task's affinity mask when dtlaunch started (sched_getaffinity)
  CpuSet task_mems;  // the NUMA nodes the task may allocate from (Mems_allowed_list)
  // True when every local rank starts from the same mask (local mode, or Slurm without a
  // per-task --cpu-bind), so the ranks of one domain divide it. False when Slurm gave this
  // task a mask of its own: then the task is alone in it.
  bool shared_mask = true;
};

struct Binding {
  CpuSet cpus;
  MemPolicy policy = MemPolicy::kNone;
  CpuSet mems;                         // NUMA nodes of the policy
  unsigned cores = 0;                  // physical cores among `cpus`: the default OMP_NUM_THREADS
  std::string why;                     // for -v: what was chosen and from what
  std::optional<std::string> warning;  // said without -v: exclusive ranks that share cores
};

// Throws Error(kBadInput) naming the rank, its mask and the CPUs it wanted when the mode's
// CPUs and the mask have nothing in common, or when --mem-bind=strict finds no allowed node.
Binding plan_binding(const Topology& topology, const AffinityRequest& request);

// Which of topology.gpus a CUDA device id names, or nullopt. GPU-<uuid> is matched against
// each GPU's UUID; MIG-... is not located (its parent GPU is known only to NVML). An index k
// counts CUDA's devices in PCI bus order (true under CUDA_DEVICE_ORDER=PCI_BUS_ID): the k-th
// GPU of the node, or, when `allocated` (Slurm's SLURM_STEP_GPUS / SLURM_JOB_GPUS, device
// minors) is given and every visible index is below its count, the k-th of the allocated GPUs:
// under ConstrainDevices (the usual setup) CUDA sees only those, numbered from 0. Otherwise
// (Slurm without device constraint exports the node-wide numbers) the k-th GPU of the node.
std::optional<std::size_t> find_gpu(const Topology& topology, std::string_view id,
                                    const std::vector<std::string>& visible,
                                    const std::optional<std::vector<unsigned>>& allocated);

}  // namespace dtlaunch::affinity
