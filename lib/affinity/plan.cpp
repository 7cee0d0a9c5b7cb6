#include "affinity/plan.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/error.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::affinity {

using core::num;

namespace {

constexpr core::Named<MemPolicy> kMemPolicies[] = {{MemPolicy::kNone, "none"},
                                                   {MemPolicy::kPreferred, "preferred"},
                                                   {MemPolicy::kPreferredMany, "preferred-many"},
                                                   {MemPolicy::kBind, "bind"}};

// Member `index` of `members` gets a contiguous block of the `count` items, the blocks as even
// as they can be; with fewer items than members, members share them (block k to several).
std::pair<std::size_t, std::size_t> block(std::size_t index, std::size_t members,
                                          std::size_t count) {
  if (count >= members) return {index * count / members, (index + 1) * count / members};
  const std::size_t k = index * count / members;
  return {k, k + 1};
}

std::vector<const CpuGroup*> groups_in(const std::vector<CpuGroup>& groups, const CpuSet& pool) {
  std::vector<const CpuGroup*> out;
  for (const CpuGroup& g : groups)
    if (g.cpus.intersects(pool)) out.push_back(&g);
  return out;
}

// The NUMA node a GPU hangs off: its numa_node when the node has CPUs, else the first NUMA
// node its local CPUs touch (firmware that reports -1).
const CpuGroup* home_numa(const Topology& topology, const Gpu& gpu) {
  if (gpu.numa_node)
    for (const CpuGroup& n : topology.numa)
      if (n.os_index == *gpu.numa_node) return &n;
  for (const CpuGroup& n : topology.numa)
    if (n.cpus.intersects(gpu.local_cpus)) return &n;
  return nullptr;
}

std::string describe_gpu(const Topology& topology, std::size_t gpu) {
  return "GPU " + topology.gpus[gpu].bus_id;
}

struct Want {
  CpuSet cpus;
  std::string why;
  bool shared = false;  // exclusive with fewer cores than ranks: some share
};

Want with_gpu(const Topology& topology, const AffinityRequest& r, const CpuSet& pool) {
  const std::size_t gpu = *r.gpu_of_local_rank[r.local_rank];
  const CpuGroup* numa = home_numa(topology, topology.gpus[gpu]);
  const std::string gpu_name = describe_gpu(topology, gpu);
  if (!numa)  // located but attached nowhere: bind to what the device says is local
    return {topology.gpus[gpu].local_cpus, "the local CPUs of " + gpu_name};
  // The local ranks whose GPUs share this NUMA node divide it (exclusive, cache).
  std::size_t peers = 1, index = 0;
  if (r.shared_mask) {
    peers = 0;
    for (std::size_t l = 0; l < r.gpu_of_local_rank.size(); ++l) {
      if (home_numa(topology, topology.gpus[*r.gpu_of_local_rank[l]]) != numa) continue;
      if (l == r.local_rank) index = peers;
      ++peers;
    }
  }
  const std::string where = "NUMA node " + num(numa->os_index) + " of " + gpu_name;
  switch (r.cpu) {
    case CpuBind::kNuma:
      return {numa->cpus, where};
    case CpuBind::kSocket:
      for (const CpuGroup& p : topology.packages)
        if (p.cpus.intersects(numa->cpus))
          return {p.cpus, "package " + num(p.os_index) + " of " + gpu_name};
      return {numa->cpus, where};
    case CpuBind::kCache: {
      auto caches = groups_in(topology.caches, numa->cpus & pool);
      if (caches.empty()) return {numa->cpus, where};
      auto [lo, hi] = block(index, peers, caches.size());
      return {caches[lo]->cpus & numa->cpus, "last-level cache " + num(lo + 1) + " of " +
                                                 num(caches.size()) + " in " + where + " (rank " +
                                                 num(index + 1) + " of " + num(peers) + " there)"};
    }
    case CpuBind::kExclusive: {
      auto cores = groups_in(topology.cores, numa->cpus & pool);
      if (cores.empty()) return {numa->cpus, where};
      auto [lo, hi] = block(index, peers, cores.size());
      CpuSet cpus;
      for (std::size_t c = lo; c < hi; ++c) cpus = cpus | cores[c]->cpus;
      return {cpus,
              num(hi - lo) + " of the " + num(cores.size()) + " cores of " + where + " (rank " +
                  num(index + 1) + " of " + num(peers) + " there)",
              peers > cores.size()};
    }
    case CpuBind::kNone:
      break;
  }
  return {pool, "the inherited mask"};
}

// The level of the topology each mode spreads the ranks over when there is no GPU to follow.
struct Level {
  CpuBind bind;
  std::vector<CpuGroup> Topology::*groups;
  const char* what;
};
constexpr Level kLevels[] = {{CpuBind::kNuma, &Topology::numa, "NUMA node"},
                             {CpuBind::kSocket, &Topology::packages, "package"},
                             {CpuBind::kCache, &Topology::caches, "last-level cache"},
                             {CpuBind::kExclusive, &Topology::cores, "core"}};

// No GPU to follow: spread the local ranks over the node's domains in blocks, neighbours
// together, as srun --distribution=block does.
Want spread(const Topology& topology, const AffinityRequest& r, const CpuSet& pool) {
  const std::size_t members = r.shared_mask ? r.gpu_of_local_rank.size() : 1;
  const std::size_t index = r.shared_mask ? r.local_rank : 0;
  const Level* level = std::find_if(std::begin(kLevels), std::end(kLevels),
                                    [&](const Level& l) { return l.bind == r.cpu; });
  if (level == std::end(kLevels)) return {pool, "the inherited mask"};  // CpuBind::kNone
  const std::string what = level->what;
  auto groups = groups_in(topology.*level->groups, pool);
  if (groups.empty()) return {pool, "the inherited mask"};
  auto [lo, hi] = block(index, members, groups.size());
  CpuSet cpus;
  for (std::size_t g = lo; g < hi; ++g) cpus = cpus | groups[g]->cpus;
  std::string why = r.cpu == CpuBind::kExclusive
                        ? num(hi - lo) + " of the " + num(groups.size()) + " cores"
                        : what + " " + num(lo + 1) + " of " + num(groups.size());
  why += " (no GPU to follow: local rank " + num(index) + " of " + num(members) + ")";
  // Several ranks per NUMA node, package or cache is the usual case; per core it is not.
  return {cpus, why, r.cpu == CpuBind::kExclusive && members > groups.size()};
}

unsigned count_cores(const Topology& topology, const CpuSet& cpus) {
  unsigned n = 0;
  for (const CpuGroup& core : topology.cores)
    if (core.cpus.intersects(cpus)) ++n;
  return n;
}

}  // namespace

std::optional<CpuBind> parse_cpu_bind(std::string_view text) {
  return core::value_of(text, kCpuBindNames);
}

std::optional<MemBind> parse_mem_bind(std::string_view text) {
  return core::value_of(text, kMemBindNames);
}

std::string_view to_string(CpuBind bind) {
  return core::name_of(bind, kCpuBindNames);
}

std::string_view to_string(MemBind bind) {
  return core::name_of(bind, kMemBindNames);
}

std::string_view to_string(MemPolicy policy) {
  return core::name_of(policy, kMemPolicies);
}

namespace {

// What the mode gives local rank r.local_rank, before the inherited mask is applied.
Want want_of(const Topology& topology, const AffinityRequest& r, const CpuSet& pool) {
  const bool follow_gpus =
      !r.gpu_of_local_rank.empty() &&
      std::all_of(r.gpu_of_local_rank.begin(), r.gpu_of_local_rank.end(),
                  [&](const auto& g) { return g && *g < topology.gpus.size(); });
  return r.cpu == CpuBind::kNone ? Want{pool, "the inherited mask"}
         : follow_gpus           ? with_gpu(topology, r, pool)
                                 : spread(topology, r, pool);
}

// How many local ranks of a shared mask get CPUs that overlap `cpus` (this rank included):
// several ranks per NUMA node, package or cache is the usual case.
std::size_t ranks_sharing(const Topology& topology, const AffinityRequest& r, const CpuSet& pool,
                          const CpuSet& cpus) {
  if (!r.shared_mask || r.cpu == CpuBind::kNone) return 1;
  std::size_t n = 0;
  AffinityRequest other = r;
  for (std::size_t l = 0; l < r.gpu_of_local_rank.size(); ++l) {
    other.local_rank = static_cast<std::uint32_t>(l);
    if ((want_of(topology, other, pool).cpus & pool).intersects(cpus)) ++n;
  }
  return std::max<std::size_t>(n, 1);
}

}  // namespace

Binding plan_binding(const Topology& topology, const AffinityRequest& r) {
  const CpuSet pool = topology.online & r.task_cpus;
  const std::string rank = "rank " + num(r.rank) + " (local " + num(r.local_rank) + ")";
  const std::string mode = "--cpu-bind=" + std::string(to_string(r.cpu));
  const auto list = [](const CpuSet& set) {
    return set.empty() ? std::string("empty") : set.to_list();
  };
  if (pool.empty())
    throw core::Error(core::ExitCode::kBadInput,
                      rank + ": " + mode + ": its affinity mask " + list(r.task_cpus) +
                          " holds no online CPU of this node (online: " + list(topology.online) +
                          "); ask Slurm for CPUs here, or pass --cpu-bind=none");
  Want want = want_of(topology, r, pool);
  Binding b;
  b.cpus = want.cpus & pool;
  if (b.cpus.empty())
    throw core::Error(core::ExitCode::kBadInput,
                      rank + ": " + mode + " wants CPUs " + list(want.cpus) + " (" + want.why +
                          ") but its affinity mask is " + list(r.task_cpus) +
                          ": no CPU in common; ask Slurm for CPUs there, or pass --cpu-bind=none");
  // OMP_NUM_THREADS: the cores, divided among the ranks that run on them; not the whole
  // domain for each, which oversubscribes it as many times as ranks share it.
  const unsigned cores = count_cores(topology, b.cpus);
  const std::size_t sharers = ranks_sharing(topology, r, pool, b.cpus);
  b.cores = std::max(1U, static_cast<unsigned>(cores / sharers));
  b.why = rank + ": CPUs " + b.cpus.to_list() + " = " + want.why;
  if (sharers > 1)
    b.why += "; " + num(cores) + " cores shared by " + num(sharers) + " ranks: " + num(b.cores) +
             (b.cores == 1 ? " thread" : " threads") + " each";
  if (pool != topology.online) {
    b.why += ", within the inherited mask " + r.task_cpus.to_list();
    if (r.cpu != CpuBind::kNone && want.cpus.contains(pool) && want.cpus != pool)
      b.why += " (Slurm or taskset narrowed the task more than asked: kept as it is)";
  }
  if (want.shared)
    b.warning = rank + ": --cpu-bind=" + std::string(to_string(r.cpu)) +
                ": fewer cores than ranks, so ranks share CPUs " + b.cpus.to_list();

  if (r.mem == MemBind::kNone) return b;
  CpuSet nodes;
  for (const CpuGroup& n : topology.numa)
    if (n.cpus.intersects(b.cpus)) nodes = nodes | CpuSet({n.os_index});
  b.mems = nodes & r.task_mems;
  if (b.mems.empty()) {
    if (r.mem == MemBind::kStrict)
      throw core::Error(core::ExitCode::kBadInput,
                        rank + ": --mem-bind=strict wants NUMA node(s) " + nodes.to_list() +
                            " (those of CPUs " + b.cpus.to_list() +
                            ") but the task may allocate only on " +
                            (r.task_mems.empty() ? std::string("none") : r.task_mems.to_list()));
    b.why += "; memory: no policy (NUMA node(s) " + nodes.to_list() +
             " are not among the allowed " + r.task_mems.to_list() + ")";
    return b;
  }
  b.policy = r.mem == MemBind::kStrict ? MemPolicy::kBind
             : b.mems.size() == 1      ? MemPolicy::kPreferred
                                       : MemPolicy::kPreferredMany;
  b.why += "; memory: " + std::string(to_string(b.policy)) + " " + b.mems.to_list() +
           " (the NUMA node(s) of those CPUs)";
  return b;
}

std::optional<std::size_t> find_gpu(const Topology& topology, std::string_view id,
                                    const std::vector<std::string>& visible,
                                    const std::optional<std::vector<unsigned>>& allocated) {
  const auto& gpus = topology.gpus;
  if (id.starts_with("GPU-")) {
    for (std::size_t i = 0; i < gpus.size(); ++i)
      if (gpus[i].uuid == id) return i;
    return std::nullopt;
  }
  auto k = core::parse_uint(id, kMaxCpuNumber);
  if (!k) return std::nullopt;  // MIG-...: only NVML knows its parent
  std::vector<std::size_t> candidates;
  for (std::size_t i = 0; i < gpus.size(); ++i) candidates.push_back(i);
  if (allocated) {
    bool renumbered = true;
    for (const std::string& v : visible) {
      auto index = core::parse_uint(v, kMaxCpuNumber);
      if (index && *index >= allocated->size()) renumbered = false;
    }
    if (renumbered)
      std::erase_if(candidates, [&](std::size_t i) {
        return std::find(allocated->begin(), allocated->end(), gpus[i].minor) == allocated->end();
      });
  }
  if (*k >= candidates.size()) return std::nullopt;
  return candidates[*k];
}

}  // namespace dtlaunch::affinity
