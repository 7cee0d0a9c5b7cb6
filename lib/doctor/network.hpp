// The doctor's network test (`dtlaunch doctor --network`): after the check-in, one task per
// node (its lowest local rank) measures latency and TCP throughput to a few peers, its ring
// neighbour and a few chosen at random with a fixed seed, within a fixed budget. O(nodes)
// traffic in all, never all-to-all. Rank 0 plans who tests whom, gathers the results and flags
// the nodes whose links are outliers against the median (judge_network). This header is the
// test's pure part; the sockets and threads are the agent's (network_agent.hpp), the exchange
// with rank 0 is network_test.hpp's.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/checks.hpp"

namespace dtlaunch::doctor {

// What one node tests: the peers it connects to, one after the other, each for `slot`.
struct NetworkPeer {
  std::uint32_t node = 0;  // index among the tested nodes
  std::string address;
  std::uint16_t port = 0;
};
struct NetworkPlan {
  std::uint32_t node = 0;
  std::chrono::milliseconds slot{0};
  std::vector<NetworkPeer> peers;
};

// Who tests whom among n nodes: node i tests i+1 (mod n), then `random_peers` others drawn with
// a fixed seed, never a pair already tested in either direction. Each node starts at most
// 1 + random_peers tests, so the traffic is O(n).
std::vector<std::vector<std::uint32_t>> plan_peers(std::uint32_t n, std::uint32_t random_peers);

// One test between two nodes, as the initiator measured it. up: initiator -> peer; down: peer ->
// initiator, in bytes per second; rtt_us: the median of a few round trips; 0 when not measured.
struct LinkResult {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  double rtt_us = 0;
  double up_bytes_per_s = 0;
  double down_bytes_per_s = 0;
  std::string error;  // "" when the test ran
  bool operator==(const LinkResult&) const = default;
};

std::string encode_plan(const NetworkPlan& plan);
NetworkPlan decode_plan(std::string_view text);  // throws Error (bad input)
std::string encode_results(const std::vector<LinkResult>& results);
std::vector<LinkResult> decode_results(std::string_view text);  // throws Error (bad input)

// Robust outlier limits, on the logarithms of the rates and round trips (they vary by factors).
// Each node is judged by its median on each side (sent, received, round trips) against the
// median of the nodes' medians: an outlier is further from it than `k` times the scaled MAD
// (1.4826 MAD) and at least `min_rate_ratio` times slower (`min_rtt_ratio` times and
// `latency_floor_us` longer for a round trip): the floors keep a quiet, uniform run, whose MAD is
// tiny, from flagging a node 20% off; `max_rate_ratio` (and `max_rtt_ratio`) times is an outlier
// whatever the MAD, which one slow node of few inflates.
struct NetworkLimits {
  std::size_t min_peers = 2;  // distinct peers whose links must show a node slow (see below)
  double k = 3.0;
  double min_rate_ratio = 5.0;
  double min_rtt_ratio = 3.0;
  double max_rate_ratio = 50.0;  // this much slower is an outlier whatever the MAD
  double max_rtt_ratio = 30.0;
  double latency_floor_us = 500;
  std::size_t min_nodes = 3;  // with two nodes a slow link cannot be blamed on either
};

// The slow-network problems (error level) for the nodes (`hosts[i]`, `ranks[i]`: the host and
// the rank that tested for node i). A link's measurement is in the hands of both its ends (either
// can make it slow for real, or report or acknowledge any number), so one link, or one peer's
// links, never convicts a node: a side of a node is slow only when its links to at least
// `min_peers` distinct peers are, and a node is unreachable only when that many peers could not
// connect to it (one that could not is a warning). `results` must hold one test per pair at
// most, as believe_results leaves them.
std::vector<Problem> judge_network(const std::vector<LinkResult>& results,
                                   const std::vector<std::string>& hosts,
                                   const std::vector<std::uint32_t>& ranks,
                                   const NetworkLimits& limits = {});

// What one node sent rank 0 as its results: decoded, or why they could not be.
struct NodeResults {
  std::vector<LinkResult> results;
  std::string unreadable;  // "" when they were read
};

// The results rank 0 believes, and the problems: a node speaks only of the tests it was
// assigned (`assigned[i]`: the peers plan_peers gave node i), once per peer. Results about
// another node's tests, about a peer outside its plan, a peer's repeats, and results that could
// not be read are refused, never judged: one `network-results-refused` warning per node says what
// was refused. `sent[i]`: what node i sent (empty when nothing came).
struct NetworkJudgement {
  std::vector<LinkResult> believed;
  std::vector<Problem> problems;  // judge_network's, then the refusals
};
NetworkJudgement judge_claims(const std::vector<std::vector<std::uint32_t>>& assigned,
                              const std::vector<NodeResults>& sent,
                              const std::vector<std::string>& hosts,
                              const std::vector<std::uint32_t>& ranks,
                              const NetworkLimits& limits = {});

// One line for the table: how many tests, the median and range of the rates, the median round
// trip; "" when no test was made.
std::string summarize_network(const std::vector<LinkResult>& results, std::size_t nodes);

// The median and the scaled median absolute deviation (1.4826 MAD) of `values`.
struct Spread {
  double median = 0;
  double sigma = 0;
};
Spread robust_spread(std::vector<double> values);

}  // namespace dtlaunch::doctor
