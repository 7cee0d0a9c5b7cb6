#include "doctor/checks.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/text.hpp"
#include "doctor/compare.hpp"

namespace dtlaunch::doctor {
namespace {

std::string num(std::uint64_t v) {
  return std::to_string(v);
}

std::string seconds(std::int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

// A report's text as a problem line quotes it. Every field comes from another task over the
// network (or from a host's own configuration): escaped and bounded, one excerpt function for
// all, so that no field can forge a line, move the cursor or flood the terminal.
std::string shown(std::string_view value, std::size_t max_bytes = 64) {
  return excerpt(value, max_bytes);
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1";
}

}  // namespace

std::vector<std::string> unique_hosts(const std::vector<const TaskReport*>& reports) {
  std::vector<std::string> hosts;
  for (const TaskReport* r : reports)
    if (std::find(hosts.begin(), hosts.end(), r->host) == hosts.end()) hosts.push_back(r->host);
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
                        num(odd.front()->contract.rank) + " (" + shown(odd.front()->host) +
                        ") but " + shown(get(rank0)) + " on rank 0");
  for (const TaskReport* r : odd)
    if (std::find(differing.begin(), differing.end(), r) == differing.end()) differing.push_back(r);
}

}  // namespace

bool Verdict::ok() const {
  return std::none_of(problems.begin(), problems.end(),
                      [](const Problem& p) { return p.severity == Severity::kError; });
}

Verdict diagnose(const Expectation& expected, std::vector<TaskReport> reports,
                 std::vector<Problem> found_by_rank0, const CheckLimits& limits) {
  Verdict verdict;
  verdict.problems = std::move(found_by_rank0);
  auto add = [&](std::string kind, Severity severity, std::vector<std::uint32_t> ranks,
                 std::vector<std::string> hosts, std::string message) {
    verdict.problems.push_back(
        {std::move(kind), severity, std::move(ranks), std::move(hosts), std::move(message)});
  };

  // duplicate-rank: the first report of a rank is kept, the others are named.
  std::map<std::uint32_t, std::vector<const TaskReport*>> by_rank;
  for (const TaskReport& r : reports) by_rank[r.contract.rank].push_back(&r);
  std::vector<const TaskReport*> firsts;
  for (const auto& [rank, claims] : by_rank) {
    firsts.push_back(claims.front());
    if (claims.size() > 1)
      add("duplicate-rank", Severity::kError, {rank}, unique_hosts(claims),
          num(claims.size()) + " tasks claim rank " + num(rank) + " (on " +
              list_hosts(unique_hosts(claims)) +
              "): two launches, or a wrong SLURM_PROCID / --node-rank");
  }
  for (const TaskReport* r : firsts) verdict.reports.push_back(*r);
  const TaskReport* rank0 = by_rank.count(0) ? by_rank[0].front() : nullptr;

  // missing-rank and unreachable: what the layout expected and nothing came from.
  std::vector<std::uint32_t> missing;
  for (std::uint32_t rank = 0; rank < expected.world_size; ++rank)
    if (!by_rank.count(rank)) missing.push_back(rank);
  std::set<std::uint32_t> nodes_heard;
  for (const TaskReport* r : firsts) nodes_heard.insert(r->contract.node_rank);
  std::map<std::string, std::vector<std::uint32_t>> silent_nodes;  // host -> its missing ranks
  for (std::uint32_t rank : missing) {
    if (rank < expected.ranks.size() && !expected.ranks[rank].host.empty()) {
      const ExpectedRank& where = expected.ranks[rank];
      const bool silent = !nodes_heard.count(where.node);
      if (silent) silent_nodes[where.host].push_back(rank);
      add("missing-rank", Severity::kError, {rank}, {where.host},
          "rank " + num(rank) + " should run on " + shown(where.host) + " as local rank " +
              num(where.local_rank) + ", and " +
              (silent ? "nothing came from " + shown(where.host)
                      : "it did not report (other ranks on " + shown(where.host) + " did)"));
    } else {
      add("missing-rank", Severity::kError, {rank}, {},
          "rank " + num(rank) + " did not report (the layout does not say on which node)");
    }
  }
  for (const auto& [host, ranks] : silent_nodes)
    add("unreachable", Severity::kError, ranks, {host},
        "nothing came from " + shown(host) + " (ranks " + compact_ranges(ranks) +
            "): its tasks did not start, or cannot reach " +
            (rank0 ? shown(rank0->contract.master_addr) + ":" + num(rank0->contract.master_port)
                   : "rank 0") +
            " (their stderr says which)");
  for (const TaskReport* r : firsts)
    if (r->contract.rank >= expected.world_size)
      add("world-mismatch", Severity::kError, {r->contract.rank}, {r->host},
          "rank " + num(r->contract.rank) + " (" + shown(r->host) +
              ") is not below the world size " + num(expected.world_size));

  if (rank0) {
    // world-mismatch: every task must agree with rank 0 on the world and the rendezvous.
    std::vector<std::string> differences;
    std::vector<const TaskReport*> differing;
    auto n = [](auto v) { return std::to_string(v); };
    compare_to_rank0(
        *rank0, firsts, "WORLD_SIZE", [&](const TaskReport& r) { return n(r.contract.world_size); },
        differences, differing);
    compare_to_rank0(
        *rank0, firsts, "NNODES", [&](const TaskReport& r) { return n(r.contract.nnodes); },
        differences, differing);
    compare_to_rank0(
        *rank0, firsts, "MASTER_ADDR", [](const TaskReport& r) { return r.contract.master_addr; },
        differences, differing);
    compare_to_rank0(
        *rank0, firsts, "MASTER_PORT",
        [&](const TaskReport& r) { return n(r.contract.master_port); }, differences, differing);
    compare_to_rank0(
        *rank0, firsts, "DTLAUNCH_RUN_ID",
        [](const TaskReport& r) { return r.contract.run_id.value_or(""); }, differences, differing);
    if (!differences.empty()) {
      std::string message = "tasks disagree about the job: ";
      for (std::size_t i = 0; i < differences.size(); ++i)
        message += (i ? "; " : "") + differences[i];
      add("world-mismatch", Severity::kError, ranks_of(differing), unique_hosts(differing),
          message + " (a stale MASTER_* or job-level sizes inherited by some tasks?)");
    }

    // program-differs: another build of the program or of dtlaunch on some node.
    std::vector<const TaskReport*> other_program, other_launcher;
    for (const TaskReport* r : firsts) {
      if (!(r->program == rank0->program)) other_program.push_back(r);
      if (!(r->launcher == rank0->launcher) || r->launcher_version != rank0->launcher_version)
        other_launcher.push_back(r);
    }
    if (!other_program.empty()) {
      const TaskReport& odd = *other_program.front();
      add("program-differs", Severity::kError, ranks_of(other_program), unique_hosts(other_program),
          "the program differs on " + list_hosts(unique_hosts(other_program)) + ": " +
              shown(odd.program.path) + " is " + num(odd.program.size) + " bytes, hash " +
              (odd.program.hash.empty() ? "unreadable" : shown(odd.program.hash)) + " there, " +
              num(rank0->program.size) + " bytes, hash " + shown(rank0->program.hash) + " on " +
              shown(rank0->host) + " (rank 0)");
    }
    if (!other_launcher.empty()) {
      const TaskReport& odd = *other_launcher.front();
      add("program-differs", Severity::kError, ranks_of(other_launcher),
          unique_hosts(other_launcher),
          "dtlaunch differs on " + list_hosts(unique_hosts(other_launcher)) + ": " +
              shown(odd.launcher.path) + " (" + shown(odd.launcher_version) + ", hash " +
              shown(odd.launcher.hash) + ") there, " + shown(rank0->launcher.path) + " (" +
              shown(rank0->launcher_version) + ", hash " + shown(rank0->launcher.hash) +
              ") on rank 0");
    }

    // host-resolves-to-loopback: Gloo and NCCL advertise what the host name resolves to.
    // Loopback is fine while every rank runs on one host (local mode on one machine).
    std::set<std::string> hosts;
    for (const TaskReport* r : firsts) hosts.insert(r->host);
    if ((expected.nodes_are_hosts && expected.nnodes > 1) || hosts.size() > 1) {
      std::vector<const TaskReport*> loopback;
      std::set<std::string> seen;
      for (const TaskReport* r : firsts)
        if (!seen.count(r->host) &&
            std::any_of(r->host_resolves_to.begin(), r->host_resolves_to.end(), is_loopback)) {
          seen.insert(r->host);
          loopback.push_back(r);
        }
      for (const TaskReport* r : loopback)
        add("host-resolves-to-loopback", Severity::kError, {r->contract.rank}, {r->host},
            shown(r->host) + " resolves its own name to " + shown(r->host_resolves_to.front()) +
                ", so Gloo and NCCL there advertise an address no other node can reach: fix "
                "/etc/hosts on " +
                shown(r->host) +
                ", or set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to its network "
                "interface");
      if (std::any_of(rank0->master_resolves_to.begin(), rank0->master_resolves_to.end(),
                      is_loopback))
        add("host-resolves-to-loopback", Severity::kError, {0}, {rank0->host},
            "MASTER_ADDR " + shown(rank0->contract.master_addr) + " resolves to " +
                shown(rank0->master_resolves_to.front()) + " on " + shown(rank0->host) +
                " (rank 0), which the other nodes cannot reach: fix /etc/hosts there");
    }
  }

  // program-cannot-execute: the launch's execve would be refused there (once per host).
  std::map<std::string, std::vector<const TaskReport*>> cannot_execute;
  for (const TaskReport* r : firsts)
    if (!r->exec_error.empty()) cannot_execute[r->host].push_back(r);
  for (const auto& [host, on_host] : cannot_execute) {
    const TaskReport& r = *on_host.front();
    add("program-cannot-execute", Severity::kError, ranks_of(on_host), {host},
        shown(r.exec_error, 400) + " (on " + shown(host) + "; the launch would exit " +
            num(static_cast<std::uint64_t>(r.exec_status)) + " there)");
  }

  // gpu-shared and gpu-isolated.
  std::map<std::pair<std::string, std::string>, std::vector<const TaskReport*>> by_gpu;
  for (const TaskReport* r : firsts)
    if (!r->bound_device.empty()) by_gpu[{r->host, r->bound_device}].push_back(r);
  for (const auto& [key, users] : by_gpu)
    if (users.size() > 1 && !users.front()->gpu_sharing_allowed)
      add("gpu-shared", Severity::kError, ranks_of(users), {key.first},
          "ranks " + compact_ranges(ranks_of(users)) + " are bound to one GPU (" +
              shown(key.second) + ") on " + shown(key.first) +
              ": NCCL refuses two ranks on one device; pass "
              "--allow-gpu-sharing if this is meant");
  std::vector<const TaskReport*> isolated;
  for (const TaskReport* r : firsts)
    if (r->gpu_isolated_by_slurm) isolated.push_back(r);
  if (!isolated.empty())
    add("gpu-isolated", Severity::kWarning, ranks_of(isolated), unique_hosts(isolated),
        "Slurm gave each task its own GPU (--gpus-per-task) on " +
            list_hosts(unique_hosts(isolated)) +
            ": NCCL cannot use NVLink between isolated GPUs; ask for --gpus-per-node instead");

  // cpu-far-from-gpu: threads and first-touch memory on the other socket from the GPU.
  std::vector<const TaskReport*> far;
  for (const TaskReport* r : firsts)
    if (r->cpus_far_from_gpu) far.push_back(r);
  for (const TaskReport* r : far)
    add("cpu-far-from-gpu", Severity::kWarning, {r->contract.rank}, {r->host},
        "rank " + num(r->contract.rank) + " (" + shown(r->host) + ") runs on CPUs " +
            shown(r->cpus) + ", none of them local to its GPU " + shown(r->bound_device) +
            " (CPUs " + shown(r->gpu_local_cpus) +
            "): --cpu-bind numa binds each rank next to its GPU (docs/affinity.md)");

  // Per-node resources, once per host.
  std::set<std::string> shm_seen, memlock_seen;
  for (const TaskReport* r : firsts) {
    if (r->gpus_on_node > 0 && r->shm_bytes < limits.min_shm_bytes &&
        shm_seen.insert(r->host).second)
      add("small-shm", Severity::kWarning, {r->contract.rank}, {r->host},
          "/dev/shm on " + shown(r->host) + " is " + num(r->shm_bytes >> 20) +
              " MiB: NCCL and DataLoader workers need more than 1 GiB");
    if (r->infiniband_devices > 0 && r->memlock_bytes && memlock_seen.insert(r->host).second)
      add("memlock-limited", Severity::kWarning, {r->contract.rank}, {r->host},
          "RLIMIT_MEMLOCK is " + num(*r->memlock_bytes >> 10) + " KiB on " + shown(r->host) +
              ", which has InfiniBand devices: RDMA registration fails; make it unlimited "
              "(slurm.conf PropagateResourceLimitsExcept=MEMLOCK, limits.conf)");
  }

  // clock-skew and slow-start, from rank 0's clock.
  if (!firsts.empty()) {
    std::int64_t first_arrival = INT64_MAX;
    for (const TaskReport* r : firsts) first_arrival = std::min(first_arrival, r->received_unix_ms);
    for (const TaskReport* r : firsts) {
      const std::int64_t skew = r->sent_unix_ms - r->received_unix_ms;
      if (skew > limits.clock_skew_ms || -skew > limits.clock_skew_ms)
        add("clock-skew", Severity::kWarning, {r->contract.rank}, {r->host},
            "the clock of " + shown(r->host) + " is " + seconds(skew < 0 ? -skew : skew) +
                (skew > 0 ? " ahead of" : " behind") + " rank 0's");
      if (r->received_unix_ms - first_arrival > limits.slow_start_ms)
        add("slow-start", Severity::kWarning, {r->contract.rank}, {r->host},
            "rank " + num(r->contract.rank) + " (" + shown(r->host) + ") arrived " +
                seconds(r->received_unix_ms - first_arrival) + " after the first");
    }
  }
  compare_software(firsts, verdict.problems);
  verdict.exclude = exclude_list(expected, verdict.problems);
  return verdict;
}

}  // namespace dtlaunch::doctor
