// What the binding decisions need to know about a node, as a plain value: which CPUs form each
// core, NUMA node, package and last-level cache, and where each NVIDIA GPU sits. Filled from
// sysfs by read_topology (affinity/read_topology.hpp); tests build it by hand too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "affinity/cpuset.hpp"

namespace dtlaunch::affinity {

// One group of CPUs: a core, a NUMA node, a package or a cache. `os_index` is the kernel's
// number for NUMA nodes (what set_mempolicy takes) and packages; for cores and caches only the
// order matters.
struct CpuGroup {
  unsigned os_index = 0;
  CpuSet cpus;  // online CPUs only
};

struct Gpu {
  std::string bus_id;  // "0000:1b:00.0", lower case, as /proc/driver/nvidia/gpus names it
  unsigned minor = 0;  // N of /dev/nvidiaN ("Device Minor")
  std::string uuid;    // "GPU-..." ("GPU UUID")
  CpuSet local_cpus;   // the PCI device's local_cpulist
  std::optional<unsigned> numa_node;  // the PCI device's numa_node, when not -1
};

struct Topology {
  CpuSet online;                // every online CPU
  std::vector<CpuGroup> cores;  // in topology order (hwloc's logical order, as lstopo shows)
  std::vector<CpuGroup> numa;   // NUMA nodes that have CPUs, in topology order
  std::vector<CpuGroup> packages;
  std::vector<CpuGroup> caches;  // the largest (last-level) cache of each group of cores
  std::vector<Gpu> gpus;         // in PCI bus id order
};

}  // namespace dtlaunch::affinity
