#include "doctor/checks.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "contract/contract.hpp"
#include "core/text.hpp"
#include "doctor/compare.hpp"

namespace dtlaunch::doctor {

using core::num;

namespace env_var = contract::env_var;

namespace {

// A report's text as a problem line quotes it. Every field comes from another task over the
// network (or from a host's own configuration): escaped and bounded, one excerpt function for
// all, so that no field can forge a line, move the cursor or flood the terminal.
std::string shown(std::string_view value, std::size_t max_bytes = 64) {
  return core::excerpt(value, max_bytes);
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1";
}

}  // namespace

std::vector<std::string> unique_hosts(const std::vector<const TaskReport*>& reports) {
  std::vector<std::string> hosts;
  for (const TaskReport* r : reports)
    if (std::find(hosts.begin(), hosts.end(), r->network.host) == hosts.end())
      hosts.push_back(r->network.host);
  return hosts;
}

std::vector<std::uint32_t> ranks_of(const std::vector<const TaskReport*>& reports) {
  std::vector<std::uint32_t> ranks;
  for (const TaskReport* r : reports) ranks.push_back(r->contract.rank);
  return ranks;
}

namespace {

std::string list_hosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts) out += (out.empty() ? "" : ", ") + shown(h);
  return out;
}

// Adds one problem for the reports that differ from rank 0's in `field`, if any.
template <class Get>
void compare_to_rank0(const TaskReport& rank0, const std::vector<const TaskReport*>& others,
                      std::string_view what, Get get, std::vector<std::string>& differences,
                      std::vector<const TaskReport*>& differing) {
  std::vector<const TaskReport*> odd;
  for (const TaskReport* r : others)
    if (get(*r) != get(rank0)) odd.push_back(r);
  if (odd.empty()) return;
  differences.push_back(std::string(what) + " " + shown(get(*odd.front())) + " on rank " +
                        num(odd.front()->contract.rank) + " (" + shown(odd.front()->network.host) +
                        ") but " + shown(get(rank0)) + " on rank 0");
  for (const TaskReport* r : odd)
    if (std::find(differing.begin(), differing.end(), r) == differing.end()) differing.push_back(r);
}

}  // namespace

bool Diagnosis::ok() const {
  return std::none_of(problems.begin(), problems.end(),
                      [](const Problem& p) { return p.severity == Severity::kError; });
}

namespace {

// What every check reads: the first report of each rank, in rank order; every claim of each
// rank; rank 0's report when it reported.
struct Evidence {
  const Expectation& expected;
  const CheckLimits& limits;
  std::map<std::uint32_t, std::vector<const TaskReport*>> by_rank;
  std::vector<const TaskReport*> firsts;
  const TaskReport* rank0 = nullptr;
};

using Problems = std::vector<Problem>;

// duplicate-rank: the first report of a rank is kept, the others are named.
void duplicate_rank(const Evidence& ev, Problems& out) {
  for (const auto& [rank, claims] : ev.by_rank)
    if (claims.size() > 1)
      out.push_back({"duplicate-rank",
                     Severity::kError,
                     {rank},
                     unique_hosts(claims),
                     num(claims.size()) + " tasks claim rank " + num(rank) + " (on " +
                         list_hosts(unique_hosts(claims)) +
                         "): two launches, or a wrong SLURM_PROCID / --node-rank"});
}

// The ranks the layout expects that did not report; whether their node sent nothing at all.
std::vector<std::uint32_t> missing_ranks(const Evidence& ev) {
  std::vector<std::uint32_t> missing;
  for (std::uint32_t rank = 0; rank < ev.expected.world_size; ++rank)
    if (!ev.by_rank.count(rank)) missing.push_back(rank);
  return missing;
}

bool node_silent(const Evidence& ev, std::uint32_t node) {
  return std::none_of(ev.firsts.begin(), ev.firsts.end(),
                      [&](const TaskReport* r) { return r->contract.node_rank == node; });
}

const ExpectedRank* where_expected(const Evidence& ev, std::uint32_t rank) {
  const auto& ranks = ev.expected.ranks;
  return rank < ranks.size() && !ranks[rank].host.empty() ? &ranks[rank] : nullptr;
}

// missing-rank: what the layout expected and did not come, with where it should have run.
void missing_rank(const Evidence& ev, Problems& out) {
  for (std::uint32_t rank : missing_ranks(ev)) {
    const ExpectedRank* where = where_expected(ev, rank);
    if (!where) {
      out.push_back({"missing-rank",
                     Severity::kError,
                     {rank},
                     {},
                     "rank " + num(rank) +
                         " did not report (the layout does not say on which "
                         "node)"});
      continue;
    }
    const std::string host = shown(where->host);
    out.push_back({"missing-rank",
                   Severity::kError,
                   {rank},
                   {where->host},
                   "rank " + num(rank) + " should run on " + host + " as local rank " +
                       num(where->local_rank) + ", and " +
                       (node_silent(ev, where->node)
                            ? "nothing came from " + host
                            : "it did not report (other ranks on " + host + " did)")});
  }
}

// unreachable: a node that sent nothing at all.
void unreachable(const Evidence& ev, Problems& out) {
  std::map<std::string, std::vector<std::uint32_t>> silent_nodes;  // host -> its missing ranks
  for (std::uint32_t rank : missing_ranks(ev))
    if (const ExpectedRank* where = where_expected(ev, rank); where && node_silent(ev, where->node))
      silent_nodes[where->host].push_back(rank);
  const std::string master =
      ev.rank0 ? shown(ev.rank0->contract.master_addr) + ":" + num(ev.rank0->contract.master_port)
               : "rank 0";
  for (const auto& [host, ranks] : silent_nodes)
    out.push_back({"unreachable",
                   Severity::kError,
                   ranks,
                   {host},
                   "nothing came from " + shown(host) + " (ranks " + core::compact_ranges(ranks) +
                       "): its tasks did not start, or cannot reach " + master +
                       " (their stderr says which)"});
}

// world-mismatch: a rank outside the world, and tasks that disagree with rank 0 about the world
// or the rendezvous.
void world_mismatch(const Evidence& ev, Problems& out) {
  for (const TaskReport* r : ev.firsts)
    if (r->contract.rank >= ev.expected.world_size)
      out.push_back({"world-mismatch",
                     Severity::kError,
                     {r->contract.rank},
                     {r->network.host},
                     "rank " + num(r->contract.rank) + " (" + shown(r->network.host) +
                         ") is not below the world size " + num(ev.expected.world_size)});
  if (!ev.rank0) return;
  std::vector<std::string> differences;
  std::vector<const TaskReport*> differing;
  auto compare = [&](std::string_view what, auto get) {
    compare_to_rank0(*ev.rank0, ev.firsts, what, get, differences, differing);
  };
  compare(env_var::kWorldSize, [](const TaskReport& r) { return num(r.contract.world_size); });
  compare(env_var::kNnodes, [](const TaskReport& r) { return num(r.contract.nnodes); });
  compare(env_var::kMasterAddr, [](const TaskReport& r) { return r.contract.master_addr; });
  compare(env_var::kMasterPort, [](const TaskReport& r) { return num(r.contract.master_port); });
  compare(env_var::kRunId,
          [](const TaskReport& r) { return r.contract.dtlaunch_run_id.value_or(""); });
  if (differences.empty()) return;
  std::string message = "tasks disagree about the job: ";
  for (std::size_t i = 0; i < differences.size(); ++i) message += (i ? "; " : "") + differences[i];
  out.push_back({"world-mismatch", Severity::kError, ranks_of(differing), unique_hosts(differing),
                 message + " (a stale MASTER_* or job-level sizes inherited by some tasks?)"});
}

// program-differs: another build of the program or of dtlaunch on some node.
void program_differs(const Evidence& ev, Problems& out) {
  if (!ev.rank0) return;
  const TaskReport& r0 = *ev.rank0;
  std::vector<const TaskReport*> other_program, other_launcher;
  for (const TaskReport* r : ev.firsts) {
    if (!(r->programs.program == r0.programs.program)) other_program.push_back(r);
    if (!(r->programs.launcher == r0.programs.launcher) ||
        r->programs.launcher_version != r0.programs.launcher_version)
      other_launcher.push_back(r);
  }
  if (!other_program.empty()) {
    const TaskReport& odd = *other_program.front();
    out.push_back(
        {"program-differs", Severity::kError, ranks_of(other_program), unique_hosts(other_program),
         "the program differs on " + list_hosts(unique_hosts(other_program)) + ": " +
             shown(odd.programs.program.path) + " is " + num(odd.programs.program.size) +
             " bytes, hash " +
             (odd.programs.program.hash.empty() ? "unreadable" : shown(odd.programs.program.hash)) +
             " there, " + num(r0.programs.program.size) + " bytes, hash " +
             shown(r0.programs.program.hash) + " on " + shown(r0.network.host) + " (rank 0)"});
  }
  if (!other_launcher.empty()) {
    const TaskReport& odd = *other_launcher.front();
    out.push_back(
        {"program-differs", Severity::kError, ranks_of(other_launcher),
         unique_hosts(other_launcher),
         "dtlaunch differs on " + list_hosts(unique_hosts(other_launcher)) + ": " +
             shown(odd.programs.launcher.path) + " (" + shown(odd.programs.launcher_version) +
             ", hash " + shown(odd.programs.launcher.hash) + ") there, " +
             shown(r0.programs.launcher.path) + " (" + shown(r0.programs.launcher_version) +
             ", hash " + shown(r0.programs.launcher.hash) + ") on rank 0"});
  }
}

// host-resolves-to-loopback: Gloo and NCCL advertise what the host name resolves to. Loopback
// is fine while every rank runs on one host (local mode on one machine).
void host_resolves_to_loopback(const Evidence& ev, Problems& out) {
  if (!ev.rank0) return;
  std::set<std::string> hosts;
  for (const TaskReport* r : ev.firsts) hosts.insert(r->network.host);
  if (!(ev.expected.nodes_are_hosts && ev.expected.nnodes > 1) && hosts.size() <= 1) return;
  std::set<std::string> seen;
  for (const TaskReport* r : ev.firsts)
    if (std::any_of(r->network.host_resolves_to.begin(), r->network.host_resolves_to.end(),
                    is_loopback) &&
        seen.insert(r->network.host).second)
      out.push_back({"host-resolves-to-loopback",
                     Severity::kError,
                     {r->contract.rank},
                     {r->network.host},
                     shown(r->network.host) + " resolves its own name to " +
                         shown(r->network.host_resolves_to.front()) +
                         ", so Gloo and NCCL there advertise an address no other node can "
                         "reach: fix /etc/hosts on " +
                         shown(r->network.host) +
                         ", or set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to its network "
                         "interface"});
  const TaskReport& r0 = *ev.rank0;
  if (std::any_of(r0.network.master_resolves_to.begin(), r0.network.master_resolves_to.end(),
                  is_loopback))
    out.push_back({"host-resolves-to-loopback",
                   Severity::kError,
                   {0},
                   {r0.network.host},
                   "MASTER_ADDR " + shown(r0.contract.master_addr) + " resolves to " +
                       shown(r0.network.master_resolves_to.front()) + " on " +
                       shown(r0.network.host) +
                       " (rank 0), which the other nodes cannot reach: fix /etc/hosts there"});
}

// program-cannot-execute: the launch's execve would be refused there (once per host).
void program_cannot_execute(const Evidence& ev, Problems& out) {
  std::map<std::string, std::vector<const TaskReport*>> cannot_execute;
  for (const TaskReport* r : ev.firsts)
    if (!r->programs.exec_error.empty()) cannot_execute[r->network.host].push_back(r);
  for (const auto& [host, on_host] : cannot_execute) {
    const TaskReport& r = *on_host.front();
    out.push_back({"program-cannot-execute",
                   Severity::kError,
                   ranks_of(on_host),
                   {host},
                   shown(r.programs.exec_error, 400) + " (on " + shown(host) +
                       "; the launch would exit " +
                       num(static_cast<std::uint64_t>(r.programs.exec_status)) + " there)"});
  }
}

// gpu-shared: two ranks bound to one device of one host.
void gpu_shared(const Evidence& ev, Problems& out) {
  std::map<std::pair<std::string, std::string>, std::vector<const TaskReport*>> by_gpu;
  for (const TaskReport* r : ev.firsts)
    if (!r->placement.bound_device.empty())
      by_gpu[{r->network.host, r->placement.bound_device}].push_back(r);
  for (const auto& [key, users] : by_gpu)
    if (users.size() > 1 && !users.front()->placement.gpu_sharing_allowed)
      out.push_back({"gpu-shared",
                     Severity::kError,
                     ranks_of(users),
                     {key.first},
                     "ranks " + core::compact_ranges(ranks_of(users)) + " are bound to one GPU (" +
                         shown(key.second) + ") on " + shown(key.first) +
                         ": NCCL refuses two ranks on one device; pass "
                         "--allow-gpu-sharing if this is meant"});
}

// gpu-isolated: Slurm's --gpus-per-task, which hides NVLink peers.
void gpu_isolated(const Evidence& ev, Problems& out) {
  std::vector<const TaskReport*> isolated;
  for (const TaskReport* r : ev.firsts)
    if (r->placement.gpu_isolated_by_slurm) isolated.push_back(r);
  if (!isolated.empty())
    out.push_back({"gpu-isolated", Severity::kWarning, ranks_of(isolated), unique_hosts(isolated),
                   "Slurm gave each task its own GPU (--gpus-per-task) on " +
                       list_hosts(unique_hosts(isolated)) +
                       ": NCCL cannot use NVLink between isolated GPUs; ask for "
                       "--gpus-per-node instead"});
}

// cpu-far-from-gpu: threads and first-touch memory on the other socket from the GPU.
void cpu_far_from_gpu(const Evidence& ev, Problems& out) {
  for (const TaskReport* r : ev.firsts)
    if (r->placement.cpus_far_from_gpu)
      out.push_back({"cpu-far-from-gpu",
                     Severity::kWarning,
                     {r->contract.rank},
                     {r->network.host},
                     "rank " + num(r->contract.rank) + " (" + shown(r->network.host) +
                         ") runs on CPUs " + shown(r->placement.cpus) +
                         ", none of them local to its GPU " + shown(r->placement.bound_device) +
                         " (CPUs " + shown(r->placement.gpu_local_cpus) +
                         "): --cpu-bind numa binds each rank next to its GPU (docs/affinity.md)"});
}

// small-shm and memlock-limited: per-node resources, once per host, in rank order.
void node_resources(const Evidence& ev, Problems& out) {
  std::set<std::string> shm_seen, memlock_seen;
  for (const TaskReport* r : ev.firsts) {
    if (r->placement.gpus_on_node > 0 && r->resources.shm_bytes < ev.limits.min_shm_bytes &&
        shm_seen.insert(r->network.host).second)
      out.push_back({"small-shm",
                     Severity::kWarning,
                     {r->contract.rank},
                     {r->network.host},
                     "/dev/shm on " + shown(r->network.host) + " is " +
                         num(r->resources.shm_bytes >> 20) +
                         " MiB: NCCL and DataLoader workers need more than 1 GiB"});
    if (r->resources.infiniband_devices > 0 && r->resources.memlock_bytes &&
        memlock_seen.insert(r->network.host).second)
      out.push_back({"memlock-limited",
                     Severity::kWarning,
                     {r->contract.rank},
                     {r->network.host},
                     "RLIMIT_MEMLOCK is " + num(*r->resources.memlock_bytes >> 10) + " KiB on " +
                         shown(r->network.host) +
                         ", which has InfiniBand devices: RDMA registration fails; make it "
                         "unlimited (slurm.conf PropagateResourceLimitsExcept=MEMLOCK, "
                         "limits.conf)"});
  }
}

// clock-skew and slow-start, from rank 0's clock, in rank order.
void timing(const Evidence& ev, Problems& out) {
  if (ev.firsts.empty()) return;
  std::int64_t first_arrival = INT64_MAX;
  for (const TaskReport* r : ev.firsts)
    first_arrival = std::min(first_arrival, r->clock.received_unix_ms);
  for (const TaskReport* r : ev.firsts) {
    const std::int64_t skew = r->clock.sent_unix_ms - r->clock.received_unix_ms;
    if (skew > ev.limits.clock_skew_ms || -skew > ev.limits.clock_skew_ms)
      out.push_back({"clock-skew",
                     Severity::kWarning,
                     {r->contract.rank},
                     {r->network.host},
                     "the clock of " + shown(r->network.host) + " is " +
                         core::duration_text(std::chrono::milliseconds(skew < 0 ? -skew : skew)) +
                         (skew > 0 ? " ahead of" : " behind") + " rank 0's"});
    if (r->clock.received_unix_ms - first_arrival > ev.limits.slow_start_ms)
      out.push_back({"slow-start",
                     Severity::kWarning,
                     {r->contract.rank},
                     {r->network.host},
                     "rank " + num(r->contract.rank) + " (" + shown(r->network.host) +
                         ") arrived " +
                         core::duration_text(
                             std::chrono::milliseconds(r->clock.received_unix_ms - first_arrival)) +
                         " after the first"});
  }
}

// env-differs, libraries-differ, driver-differs (compare.hpp).
void software_differs(const Evidence& ev, Problems& out) {
  compare_software(ev.firsts, out);
}

// The checks, in the order their problems are listed (docs/doctor.md names each kind). A check
// that yields two kinds finds them in one pass over the ranks, and lists them in rank order.
using Check = void (*)(const Evidence&, Problems&);
constexpr Check kChecks[] = {
    duplicate_rank,         missing_rank,    unreachable,
    world_mismatch,         program_differs, host_resolves_to_loopback,
    program_cannot_execute, gpu_shared,      gpu_isolated,
    cpu_far_from_gpu,       node_resources,  timing,
    software_differs,
};

}  // namespace

Diagnosis diagnose(const Expectation& expected, std::vector<TaskReport> reports,
                   std::vector<Problem> found_by_rank0, const CheckLimits& limits) {
  Evidence ev{expected, limits, {}, {}, nullptr};
  for (const TaskReport& r : reports) ev.by_rank[r.contract.rank].push_back(&r);
  for (const auto& [rank, claims] : ev.by_rank) ev.firsts.push_back(claims.front());
  if (ev.by_rank.count(0)) ev.rank0 = ev.by_rank[0].front();
  Diagnosis verdict;
  verdict.problems = std::move(found_by_rank0);
  for (const Check check : kChecks) check(ev, verdict.problems);
  // The first report of each rank moves into the verdict: a copy would double rank 0's peak
  // memory for the reports (a TaskReport is about 1 KiB, plus its strings).
  for (const TaskReport* r : ev.firsts)
    verdict.reports.push_back(std::move(reports[static_cast<std::size_t>(r - reports.data())]));
  verdict.exclude = exclude_list(expected, verdict.problems);
  return verdict;
}

}  // namespace dtlaunch::doctor
