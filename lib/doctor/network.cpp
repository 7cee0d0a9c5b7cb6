// The network test's pure part (network.hpp): who tests whom, the plan's and results' wire
// forms, and the judge of the results. No sockets, no threads: table-tested.
#include "doctor/network.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

// The launcher's one libm symbol that glibc 2.29 versioned anew (a faster pow, same results on
// these finite inputs): bound to the older version, the release binary's glibc floor is 2.28
// (RHEL 8) instead of 2.29 (scripts/package.sh checks it).
#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver pow,pow@GLIBC_2.2.5");
#endif

namespace dtlaunch::doctor {
namespace {

std::string rate_text(double bytes_per_s) {
  char text[32];
  if (bytes_per_s >= 1e9)
    std::snprintf(text, sizeof text, "%.2f GB/s", bytes_per_s / 1e9);
  else if (bytes_per_s >= 1e6)
    std::snprintf(text, sizeof text, "%.1f MB/s", bytes_per_s / 1e6);
  else
    std::snprintf(text, sizeof text, "%.0f kB/s", bytes_per_s / 1e3);
  return text;
}

std::string rtt_text(double us) {
  return core::duration_text(std::chrono::duration<double, std::micro>(us));
}

std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  while (!line.empty()) {
    const std::size_t blank = line.find(' ');
    if (blank != 0) words.push_back(line.substr(0, blank));
    line = blank == std::string_view::npos ? std::string_view{} : line.substr(blank + 1);
  }
  return words;
}

template <class OnLine>
void for_each_line(std::string_view text, OnLine on_line) {
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (!line.empty()) on_line(line);
  }
}

std::uint64_t number_of(std::string_view word, std::uint64_t max, std::string_view what) {
  const auto n = core::parse_uint(word, max);
  if (!n)
    throw core::Error(core::ExitCode::kBadInput, "doctor network " + std::string(what) + ": '" +
                                                     core::excerpt(word) + "' is not a number");
  return *n;
}

double rate_of(std::string_view word) {
  if (word == "-") return -1;
  return static_cast<double>(number_of(word, UINT64_MAX, "result"));
}

}  // namespace

Spread robust_spread(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    const std::size_t mid = v.size() / 2;
    return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  };
  s.median = median(values);
  for (double& v : values) v = std::abs(v - s.median);
  s.sigma = 1.4826 * median(values);
  return s;
}

std::vector<std::vector<std::uint32_t>> plan_peers(std::uint32_t n, std::uint32_t random_peers) {
  std::vector<std::vector<std::uint32_t>> peers(n);
  if (n < 2) return peers;
  std::set<std::pair<std::uint32_t, std::uint32_t>> paired;
  auto pair_of = [](std::uint32_t a, std::uint32_t b) {
    return std::pair<std::uint32_t, std::uint32_t>(std::min(a, b), std::max(a, b));
  };
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t next = (i + 1) % n;
    if (paired.insert(pair_of(i, next)).second) peers[i].push_back(next);
  }
  std::mt19937_64 random(0x5eed'd0c7'0000ull + n);  // fixed: the same job tests the same pairs
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t tries = 0, added = 0; added < random_peers && tries < 8 * random_peers;
         ++tries) {
      const auto j = static_cast<std::uint32_t>(random() % n);
      if (j == i || !paired.insert(pair_of(i, j)).second) continue;
      peers[i].push_back(j);
      ++added;
    }
  return peers;
}

std::string encode_plan(const NetworkPlan& plan) {
  std::string out =
      "node " + std::to_string(plan.node) + "\nslot_ms " + std::to_string(plan.slot.count()) + "\n";
  for (const NetworkPeer& p : plan.peers)
    out += "peer " + std::to_string(p.node) + " " + std::to_string(p.port) + " " + p.address + "\n";
  return out;
}

NetworkPlan decode_plan(std::string_view text) {
  NetworkPlan plan;
  for_each_line(text, [&](std::string_view line) {
    const auto w = words_of(line);
    if (w.size() == 2 && w[0] == "node") {
      plan.node = static_cast<std::uint32_t>(number_of(w[1], UINT32_MAX, "plan"));
    } else if (w.size() == 2 && w[0] == "slot_ms") {
      plan.slot = std::chrono::milliseconds(number_of(w[1], 600000, "plan"));
    } else if (w.size() == 4 && w[0] == "peer") {
      plan.peers.push_back({static_cast<std::uint32_t>(number_of(w[1], UINT32_MAX, "plan")),
                            std::string(w[3]),
                            static_cast<std::uint16_t>(number_of(w[2], 65535, "plan"))});
    } else {
      throw core::Error(core::ExitCode::kBadInput,
                        "doctor network plan: line '" + core::excerpt(line) + "'");
    }
  });
  if (plan.peers.size() > 64)
    throw core::Error(core::ExitCode::kBadInput, "doctor network plan: more than 64 peers");
  return plan;
}

std::string encode_results(const std::vector<LinkResult>& results) {
  std::string out;
  auto rate = [](double r) {
    return r < 0 ? std::string("-") : std::to_string(static_cast<std::uint64_t>(r));
  };
  for (const LinkResult& r : results)
    out += "link " + std::to_string(r.from) + " " + std::to_string(r.to) + " " +
           std::to_string(static_cast<std::uint64_t>(r.rtt_us)) + " " + rate(r.up_bytes_per_s) +
           " " + rate(r.down_bytes_per_s) + " " + core::excerpt(r.error, 200) + "\n";
  return out;
}

std::vector<LinkResult> decode_results(std::string_view text) {
  std::vector<LinkResult> results;
  for_each_line(text, [&](std::string_view line) {
    const auto w = words_of(line);
    if (results.size() >= 64)
      throw core::Error(core::ExitCode::kBadInput, "doctor network results: more than 64");
    if (w.size() < 6 || w[0] != "link")
      throw core::Error(core::ExitCode::kBadInput,
                        "doctor network result: line '" + core::excerpt(line) + "'");
    LinkResult r;
    r.from = static_cast<std::uint32_t>(number_of(w[1], UINT32_MAX, "result"));
    r.to = static_cast<std::uint32_t>(number_of(w[2], UINT32_MAX, "result"));
    r.rtt_us = static_cast<double>(number_of(w[3], UINT64_MAX, "result"));
    r.up_bytes_per_s = rate_of(w[4]);
    r.down_bytes_per_s = rate_of(w[5]);
    const auto after = static_cast<std::size_t>(w[5].data() - line.data()) + w[5].size();
    if (after + 1 < line.size()) r.error = std::string(line.substr(after + 1));
    results.push_back(std::move(r));
  });
  return results;
}

namespace {

// A measured side of a link, as evidence about one of its nodes: the peer at its other end.
struct PeerValue {
  std::uint32_t peer;
  double value;
};

// The results sorted out per node: what it sends, what it receives and its round trips, each
// with the peer of the link; which peers tested it, and which of them could not connect. A test
// that could not connect says nothing of a rate: it counts against the peer it tried, which a
// node that checked in but takes no connection is.
struct Measurements {
  explicit Measurements(std::size_t n)
      : sent(n), received(n), round_trips(n), testers(n), failed_by(n), first_error(n) {}
  std::vector<std::vector<PeerValue>> sent, received, round_trips;
  std::vector<std::set<std::uint32_t>> testers, failed_by;
  std::vector<std::string> first_error;
  std::size_t tests = 0, failed = 0;
};

Measurements sort_out(const std::vector<LinkResult>& results, std::size_t n) {
  Measurements m(n);
  for (const LinkResult& r : results) {
    if (r.from >= n || r.to >= n || r.from == r.to) continue;
    ++m.tests;
    m.testers[r.to].insert(r.from);
    if (!r.error.empty()) {
      ++m.failed;
      if (m.failed_by[r.to].insert(r.from).second && m.first_error[r.to].empty())
        m.first_error[r.to] = r.error;
      continue;
    }
    if (r.up_bytes_per_s >= 0) {
      m.sent[r.from].push_back({r.to, r.up_bytes_per_s});
      m.received[r.to].push_back({r.from, r.up_bytes_per_s});
    }
    if (r.down_bytes_per_s >= 0) {
      m.sent[r.to].push_back({r.from, r.down_bytes_per_s});
      m.received[r.from].push_back({r.to, r.down_bytes_per_s});
    }
    if (r.rtt_us > 0) {
      m.round_trips[r.from].push_back({r.to, r.rtt_us});
      m.round_trips[r.to].push_back({r.from, r.rtt_us});
    }
  }
  return m;
}

// In logarithms: rates and delays vary by factors, and a factor is what makes a link slow.
double log_of(double v) {
  return std::log10(std::max(v, 1.0));
}

// One side of every node's links (what it sends, what it receives, or its round trips): the
// node's median, in logarithms, and whether it is an outlier among the nodes' medians. A node is
// judged by the median of its links, and the job by the median of its nodes, so that a slow node
// weighs as one node however many links it is on: with three nodes, four of the six directions
// touch any one node, and a throttled sender slows what it receives too (its acknowledgements
// queue behind its own data), which dragged a median of directions down to its level.
struct Side {
  std::vector<std::optional<double>> node_log;  // none: nothing measured on this side
  std::vector<bool> slow;
  double median = 0;  // the job's, in the side's unit
};

struct SideLimits {
  bool higher_is_slow;
  double k, min_ratio, max_ratio, floor;
  std::size_t min_peers;
};

Side judge_side(const std::vector<std::vector<PeerValue>>& per_node, const SideLimits& l) {
  Side side;
  std::vector<double> medians;
  for (const auto& values : per_node) {
    std::vector<double> logs;
    for (const PeerValue& v : values) logs.push_back(log_of(v.value));
    side.node_log.push_back(logs.empty() ? std::nullopt
                                         : std::optional(robust_spread(logs).median));
    if (side.node_log.back()) medians.push_back(*side.node_log.back());
  }
  const Spread job = robust_spread(medians);
  side.median = std::pow(10.0, job.median);
  // The MAD widens the margin on a noisy run, but only so far: with few nodes one slow node
  // inflates it, and a node 50x slower than the median is never noise.
  const double margin =
      std::clamp(l.k * job.sigma, std::log10(l.min_ratio), std::log10(l.max_ratio));
  auto beyond = [&](double log) {
    return (l.higher_is_slow ? log > job.median + margin : log < job.median - margin) &&
           std::abs(std::pow(10.0, log) - side.median) > l.floor;
  };
  for (std::size_t i = 0; i < per_node.size(); ++i) {
    // Either end of a link can make it slow: only links to several peers convict a node.
    std::set<std::uint32_t> witnesses;
    for (const PeerValue& v : per_node[i])
      if (beyond(log_of(v.value))) witnesses.insert(v.peer);
    side.slow.push_back(side.node_log[i] && beyond(*side.node_log[i]) &&
                        witnesses.size() >= l.min_peers);
  }
  return side;
}

struct Sides {
  Side sent, received, round_trips;
};

Sides judge_sides(const Measurements& m, const NetworkLimits& limits) {
  const SideLimits rate{false, limits.k,        limits.min_rate_ratio, limits.max_rate_ratio,
                        0,     limits.min_peers};
  const SideLimits rtt{true,
                       limits.k,
                       limits.min_rtt_ratio,
                       limits.max_rtt_ratio,
                       limits.latency_floor_us,
                       limits.min_peers};
  return {judge_side(m.sent, rate), judge_side(m.received, rate), judge_side(m.round_trips, rtt)};
}

// Most tests failing says more about the network than about any node: a firewall that lets
// only the rendezvous port through, say. Blaming every node would exclude the whole job.
std::optional<Problem> most_tests_failed(const Measurements& m) {
  if (m.tests == 0 || 2 * m.failed <= m.tests) return std::nullopt;
  const auto first = std::find_if(m.first_error.begin(), m.first_error.end(),
                                  [](const std::string& e) { return !e.empty(); });
  return Problem{"network-test-failed",
                 Severity::kWarning,
                 {},
                 {},
                 std::to_string(m.failed) + " of the " + std::to_string(m.tests) +
                     " network tests could not connect (" + core::excerpt(*first, 120) +
                     "): do the nodes accept TCP connections on ports other than the "
                     "rendezvous port? No node is blamed"};
}

// Whether more than half of the peers that tested node i could not connect to it.
bool mostly_unreachable(const Measurements& m, std::size_t i) {
  return 2 * m.failed_by[i].size() > m.testers[i].size();
}

// What is slow about node i, each against the job's median; empty when nothing is.
std::vector<std::string> slow_sides(const Sides& s, const Measurements& m, std::size_t i,
                                    std::size_t min_peers) {
  std::vector<std::string> why;
  auto at = [&](const Side& side) { return std::pow(10.0, *side.node_log[i]); };
  if (s.sent.slow[i])
    why.push_back("sends at " + rate_text(at(s.sent)) + " against the job's " +
                  rate_text(s.sent.median));
  if (s.received.slow[i])
    why.push_back("receives at " + rate_text(at(s.received)) + " against the job's " +
                  rate_text(s.received.median));
  if (s.round_trips.slow[i])
    why.push_back("answers in " + rtt_text(at(s.round_trips)) + " against the job's " +
                  rtt_text(s.round_trips.median));
  if (mostly_unreachable(m, i) && m.failed_by[i].size() >= min_peers)
    why.push_back("cannot be reached by " + std::to_string(m.failed_by[i].size()) + " of the " +
                  std::to_string(m.testers[i].size()) + " peers that tested it (" +
                  core::excerpt(m.first_error[i], 120) + ")");
  return why;
}

// A node that fewer than `min_peers` peers could not reach, most of those that tested it (with
// three nodes each is tested by one): said, as that peer's word, but not blamed on the node.
std::optional<Problem> unconfirmed_unreachable(const Measurements& m, std::size_t i,
                                               const std::vector<std::string>& hosts,
                                               const std::vector<std::uint32_t>& ranks) {
  if (!mostly_unreachable(m, i)) return std::nullopt;
  std::string by;
  for (std::uint32_t peer : m.failed_by[i])
    by += (by.empty() ? "" : ", ") + core::excerpt(hosts[peer], 60);
  return Problem{"slow-network",
                 Severity::kWarning,
                 {ranks[i]},
                 {hosts[i]},
                 core::excerpt(hosts[i], 60) + " could not be reached by " + by + " (" +
                     core::excerpt(m.first_error[i], 120) +
                     "): too few peers to tell which end is at fault, not excluded"};
}

}  // namespace

std::vector<Problem> judge_network(const std::vector<LinkResult>& results,
                                   const std::vector<std::string>& hosts,
                                   const std::vector<std::uint32_t>& ranks,
                                   const NetworkLimits& limits) {
  const std::size_t n = hosts.size();
  if (n < limits.min_nodes) return {};
  const Measurements m = sort_out(results, n);
  if (auto failed = most_tests_failed(m)) return {*failed};
  const Sides sides = judge_sides(m, limits);
  std::vector<Problem> problems;
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<std::string> why = slow_sides(sides, m, i, limits.min_peers);
    if (why.empty()) {
      if (auto warning = unconfirmed_unreachable(m, i, hosts, ranks)) problems.push_back(*warning);
      continue;
    }
    std::string message = core::excerpt(hosts[i], 60) + " ";
    for (std::size_t k = 0; k < why.size(); ++k)
      message += (k == 0 ? "" : k + 1 == why.size() ? " and " : ", ") + why[k];
    message +=
        " (medians: the node's over its links, the job's over its nodes): a degraded "
        "link, NIC or interface";
    problems.push_back({"slow-network", Severity::kError, {ranks[i]}, {hosts[i]}, message});
  }
  return problems;
}

namespace {

// What one node's results held beyond the tests it was assigned.
struct Refusals {
  std::size_t others = 0;      // about another node's tests
  std::size_t unassigned = 0;  // about a peer outside its plan
  std::size_t repeats = 0;     // about a peer it had already reported
};

std::vector<LinkResult> believe(std::uint32_t node, const std::vector<std::uint32_t>& assigned,
                                const std::vector<LinkResult>& claimed, Refusals& refused) {
  std::vector<LinkResult> believed;
  std::set<std::uint32_t> reported;
  for (const LinkResult& r : claimed) {
    if (r.from != node)
      ++refused.others;
    else if (std::find(assigned.begin(), assigned.end(), r.to) == assigned.end())
      ++refused.unassigned;
    else if (!reported.insert(r.to).second)
      ++refused.repeats;
    else
      believed.push_back(r);
  }
  return believed;
}

std::optional<Problem> refusal(const std::string& host, std::uint32_t rank, std::size_t assigned,
                               const NodeResults& sent, const Refusals& r) {
  std::string what;
  if (!sent.unreadable.empty()) {
    what = "sent network results that could not be read (" + core::excerpt(sent.unreadable, 120) +
           "): all refused";
  } else {
    std::string parts;
    auto part = [&](std::size_t count, const char* text) {
      if (count) parts += (parts.empty() ? "" : ", ") + std::to_string(count) + text;
    };
    part(r.repeats, " repeating a peer");
    part(r.unassigned, " about peers outside its plan");
    part(r.others, " about other nodes' tests");
    if (parts.empty()) return std::nullopt;
    what = "sent " + std::to_string(sent.results.size()) + " network results for its " +
           std::to_string(assigned) + " assigned test(s); refused " + parts;
  }
  return Problem{"network-results-refused",
                 Severity::kWarning,
                 {rank},
                 {host},
                 core::excerpt(host, 60) + " " + what + ". Refused results are not judged"};
}

}  // namespace

NetworkJudgement judge_claims(const std::vector<std::vector<std::uint32_t>>& assigned,
                              const std::vector<NodeResults>& sent,
                              const std::vector<std::string>& hosts,
                              const std::vector<std::uint32_t>& ranks,
                              const NetworkLimits& limits) {
  NetworkJudgement judgement;
  std::vector<Problem> refused;
  const std::vector<std::uint32_t> none;
  for (std::uint32_t i = 0; i < hosts.size() && i < sent.size(); ++i) {
    const std::vector<std::uint32_t>& plan = i < assigned.size() ? assigned[i] : none;
    Refusals r;
    if (sent[i].unreadable.empty())
      for (LinkResult& b : believe(i, plan, sent[i].results, r))
        judgement.believed.push_back(std::move(b));
    if (auto p = refusal(hosts[i], ranks[i], plan.size(), sent[i], r)) refused.push_back(*p);
  }
  judgement.problems = judge_network(judgement.believed, hosts, ranks, limits);
  judgement.problems.insert(judgement.problems.end(), refused.begin(), refused.end());
  return judgement;
}

std::string summarize_network(const std::vector<LinkResult>& results, std::size_t nodes) {
  std::vector<double> rates, rtts;
  std::size_t failed = 0;
  for (const LinkResult& r : results) {
    if (!r.error.empty()) ++failed;
    for (double rate : {r.up_bytes_per_s, r.down_bytes_per_s})
      if (r.error.empty() && rate >= 0) rates.push_back(rate);
    if (r.rtt_us > 0) rtts.push_back(r.rtt_us);
  }
  if (results.empty()) return {};
  std::string out =
      std::to_string(results.size()) + " tests between " + std::to_string(nodes) + " nodes";
  if (!rates.empty()) {
    const auto [low, high] = std::minmax_element(rates.begin(), rates.end());
    out += ", throughput median " + rate_text(robust_spread(rates).median) + " (" +
           rate_text(*low) + " to " + rate_text(*high) + ")";
  }
  if (!rtts.empty()) out += ", round trip median " + rtt_text(robust_spread(rtts).median);
  if (failed) out += ", " + std::to_string(failed) + " could not connect";
  return out;
}

}  // namespace dtlaunch::doctor
