#include "affinity/sysfs_topology.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>

namespace dtlaunch::affinity {

namespace {

constexpr unsigned kNoGroup = std::numeric_limits<unsigned>::max();

// For each CPU, the position of its group at each level placed so far, outermost first
// (kNoGroup where no group of a level holds it): comparing two of them compares where the CPUs
// sit in the tree walk.
using Paths = std::vector<std::vector<unsigned>>;

unsigned first(const CpuSet& cpus) {
  return cpus.ids().front();
}

// Sorts one level's groups by where their first CPU sits among the levels above, then by that
// CPU, and records each CPU's position at this level for the levels below.
void place(std::vector<CpuGroup>& groups, Paths& paths) {
  std::sort(groups.begin(), groups.end(), [&](const CpuGroup& a, const CpuGroup& b) {
    const unsigned fa = first(a.cpus), fb = first(b.cpus);
    return std::tie(paths[fa], fa) < std::tie(paths[fb], fb);
  });
  std::vector<unsigned> position(paths.size(), kNoGroup);
  for (unsigned i = 0; i < groups.size(); ++i)
    for (unsigned cpu : groups[i].cpus.ids()) position[cpu] = i;
  for (std::size_t cpu = 0; cpu < paths.size(); ++cpu) paths[cpu].push_back(position[cpu]);
}

// A CPU's own set of a level, online CPUs only; the CPU alone when sysfs says nothing usable
// (no file, or a set without the CPU itself).
CpuSet own_set(unsigned cpu, const std::optional<CpuSet>& said, const CpuSet& online) {
  if (said) {
    CpuSet cpus = *said & online;
    if (cpus.contains(cpu)) return cpus;
  }
  return CpuSet({cpu});
}

// As hwloc does, a group is made once, by its first CPU, so that every CPU naming it agrees.
std::vector<CpuGroup> cores_of(const SysfsFacts& facts) {
  std::map<unsigned, const CpuFacts*> by_cpu;
  for (const CpuFacts& f : facts.cpus) by_cpu[f.cpu] = &f;
  std::vector<CpuGroup> cores;
  for (unsigned cpu : facts.online.ids()) {
    const auto it = by_cpu.find(cpu);
    if (it == by_cpu.end()) {
      cores.push_back({cpu, CpuSet({cpu})});
      continue;
    }
    CpuSet cpus = own_set(cpu, it->second->core, facts.online);
    if (first(cpus) == cpu) cores.push_back({it->second->core_id.value_or(cpu), std::move(cpus)});
  }
  return cores;
}

// Packages from package_cpus, else from equal physical_package_id values; a package without an
// id is numbered by its position once ordered (hwloc would call it -1).
std::vector<CpuGroup> packages_of(const SysfsFacts& facts) {
  std::vector<CpuGroup> packages;
  std::map<unsigned, std::vector<unsigned>> by_id;
  for (const CpuFacts& f : facts.cpus) {
    if (!facts.online.contains(f.cpu)) continue;
    if (f.package) {
      CpuSet cpus = own_set(f.cpu, f.package, facts.online);
      if (first(cpus) == f.cpu) packages.push_back({f.package_id.value_or(kNoGroup), cpus});
    } else if (f.package_id) {
      by_id[*f.package_id].push_back(f.cpu);
    }
  }
  for (auto& [id, cpus] : by_id) packages.push_back({id, CpuSet(std::move(cpus))});
  if (packages.empty()) packages.push_back({0, facts.online});
  return packages;
}

std::vector<CpuGroup> numa_of(const SysfsFacts& facts) {
  std::vector<CpuGroup> nodes;
  for (const NodeFacts& n : facts.nodes) {
    CpuSet cpus = n.cpus & facts.online;
    if (!cpus.empty()) nodes.push_back({n.os_index, std::move(cpus)});
  }
  if (nodes.empty()) nodes.push_back({0, facts.online});
  return nodes;
}

// Every level's caches, largest level first. A cache that shares no CPU (an empty map) is its
// CPU's core's, as hwloc reads it.
std::vector<std::vector<CpuGroup>> caches_of(const SysfsFacts& facts) {
  std::map<unsigned, std::vector<CpuGroup>, std::greater<>> by_level;
  for (const CpuFacts& f : facts.cpus) {
    if (!facts.online.contains(f.cpu)) continue;
    for (const CacheFact& cache : f.caches) {
      CpuSet cpus = own_set(f.cpu, cache.cpus.empty() ? f.core : cache.cpus, facts.online);
      std::vector<CpuGroup>& level = by_level[cache.level];
      // Two entries of one level naming the same CPUs (a cache listed twice) are one cache, as
      // hwloc merges them; both come from this CPU, so the last group is the one to compare.
      const bool known = !level.empty() && level.back().cpus == cpus;
      if (first(cpus) == f.cpu && !known) level.push_back({0, std::move(cpus)});
    }
  }
  std::vector<std::vector<CpuGroup>> levels;
  for (auto& [level, groups] : by_level) levels.push_back(std::move(groups));
  return levels;
}

void number_by_position(std::vector<CpuGroup>& groups, bool only_unknown) {
  for (unsigned i = 0; i < groups.size(); ++i)
    if (!only_unknown || groups[i].os_index == kNoGroup) groups[i].os_index = i;
}

}  // namespace

Topology build_topology(const SysfsFacts& facts) {
  Topology topology;
  topology.online = facts.online;
  if (facts.online.empty()) return topology;
  Paths paths(facts.online.ids().back() + 1);
  topology.packages = packages_of(facts);
  place(topology.packages, paths);
  number_by_position(topology.packages, true);
  topology.numa = numa_of(facts);
  place(topology.numa, paths);
  std::vector<std::vector<CpuGroup>> caches = caches_of(facts);
  for (std::vector<CpuGroup>& level : caches) {
    place(level, paths);
    number_by_position(level, false);
  }
  if (!caches.empty()) topology.caches = std::move(caches.front());
  topology.cores = cores_of(facts);
  place(topology.cores, paths);
  return topology;
}

std::optional<CpuSet> parse_cpumask(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  std::vector<unsigned> ids;
  unsigned base = 0;  // the CPU of the lowest bit of the word being read, from the right
  while (true) {
    const std::size_t comma = text.rfind(',');
    const std::string_view word = comma == std::string_view::npos ? text : text.substr(comma + 1);
    if (word.empty() || word.size() > 8) return std::nullopt;
    std::uint32_t bits = 0;
    for (char c : word) {
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      bits = bits << 4 | static_cast<std::uint32_t>(digit);
    }
    for (unsigned b = 0; b < 32; ++b) {
      if (!(bits >> b & 1U)) continue;
      if (base + b > kMaxCpuNumber) return std::nullopt;
      ids.push_back(base + b);
    }
    if (comma == std::string_view::npos) break;
    text = text.substr(0, comma);
    base += 32;
  }
  return CpuSet(std::move(ids));
}

}  // namespace dtlaunch::affinity
