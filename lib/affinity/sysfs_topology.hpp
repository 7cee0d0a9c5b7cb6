// The node's topology made from what Linux says of each CPU in sysfs, as a pure function: the
// facts come in parsed, a Topology comes out. Kept apart from the reading of the files so that
// machine shapes no fixture has (CPUs numbered across sockets, an offline CPU, a VM without
// topology/) can be tested as tables.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "affinity/cpuset.hpp"
#include "affinity/topology.hpp"

namespace dtlaunch::affinity {

// One data or unified cache of a CPU (cache/indexN/): instruction caches are left out when read.
struct CacheFact {
  unsigned level = 0;  // cache/indexN/level
  CpuSet cpus;         // shared_cpu_list or shared_cpu_map
};

// What sysfs says of one online CPU (cpu/cpuN/topology/ and cache/); nullopt where it says
// nothing (a VM without topology/, a kernel without the file).
struct CpuFacts {
  unsigned cpu = 0;
  std::optional<CpuSet> core;          // core_cpus(_list), else thread_siblings(_list)
  std::optional<unsigned> core_id;     // core_id
  std::optional<CpuSet> package;       // package_cpus(_list), else core_siblings(_list)
  std::optional<unsigned> package_id;  // physical_package_id
  std::vector<CacheFact> caches;       // any level, any order
};

// node/nodeN/cpulist (or cpumap).
struct NodeFacts {
  unsigned os_index = 0;
  CpuSet cpus;
};

struct SysfsFacts {
  CpuSet online;                 // cpu/online
  std::vector<CpuFacts> cpus;    // online CPUs; one that is missing here is its own core
  std::vector<NodeFacts> nodes;  // empty when sys/devices/system/node is absent
};

// The Topology hwloc's Linux backend makes of the same files, without GPUs: offline CPUs left
// out of every group and groups without an online CPU dropped; a CPU without core facts its own
// core; without any package facts one package (0), without nodes one NUMA node (0); `caches`
// the groups of the largest cache level. Groups are in hwloc's logical order, a walk of the
// tree package -> NUMA node -> cache (largest level first) -> core whose siblings are ordered by
// their first CPU, so that CPUs numbered across sockets (0 on socket 0, 1 on socket 1, ...)
// still give the cores of socket 0 first.
Topology build_topology(const SysfsFacts& facts);

// A kernel CPU mask ("ff,00000000": 32-bit hex words, most significant first), as in
// topology/core_cpus and cache/indexN/shared_cpu_map; nullopt when the text is not one or sets
// a CPU above kMaxCpuNumber.
std::optional<CpuSet> parse_cpumask(std::string_view text);

}  // namespace dtlaunch::affinity
