// The I/O shell of the affinity decisions: the node's topology from sysfs and procfs, and the
// mask the task was started with.
#pragma once

#include <string>
#include <string_view>

#include "affinity/cpuset.hpp"
#include "affinity/topology.hpp"

namespace dtlaunch::affinity {

// Reads the node under `root` ("/" for this machine; DTLAUNCH_TOPOLOGY_ROOT for a fixture):
// cores, NUMA nodes, packages and last-level caches from root/sys/devices/system/cpu and node
// (the files hwloc's Linux backend reads; build_topology, affinity/sysfs_topology.hpp, says how),
// offline CPUs left out; NVIDIA GPUs from root/proc/driver/nvidia/gpus/*/information and the PCI
// device's local_cpulist and numa_node in root/sys/bus/pci/devices. Throws Error(kBadInput)
// naming DTLAUNCH_TOPOLOGY_ROOT when such a root has no CPU or holds what sysfs cannot,
// Error(kFailure) when this machine's sys/devices/system/cpu/online cannot be read.
Topology read_topology(const std::string& root);
// The variable whose value `root` is, for the errors; declared with the launcher's settings
// (contract/settings.hpp, which the launch layer checks it against).
inline constexpr std::string_view kTopologyRootVariable = "DTLAUNCH_TOPOLOGY_ROOT";

struct TaskMask {
  CpuSet cpus;  // sched_getaffinity
  CpuSet mems;  // Mems_allowed_list of /proc/self/status
};

// This process's mask. Under a root other than "/", root/proc/self/status stands for it when
// present (a fixture of a narrowed task), else the whole node.
TaskMask read_task_mask(const std::string& root, const Topology& topology);

}  // namespace dtlaunch::affinity
