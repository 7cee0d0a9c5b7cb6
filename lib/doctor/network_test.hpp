// The network test's orchestration over the check-in's connections (`dtlaunch doctor
// --network`): rank 0 plans who tests whom, sends every node's agent its plan, runs its own and
// gathers the results for the pure judge (network.hpp); a node's side runs the plan it is sent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "doctor/checks.hpp"
#include "doctor/report.hpp"
#include "doctor/wire.hpp"

namespace dtlaunch::doctor {

class NetworkAgent;

// `dtlaunch doctor --network`.
struct NetworkOptions {
  bool enabled = false;
  std::chrono::milliseconds budget{2000};  // the whole test, every node at once
  std::uint32_t random_peers = 2;          // besides the ring neighbour
};

// Rank 0's side, after the check-in: every node's agent gets its plan, all test at once, and
// rank 0 gathers the results within the budget (and 2 s for them to arrive). `agents`: the
// connected nodes whose agent takes part, as (its descriptor, the index of its report);
// `own_agent`: rank 0's, run in a thread. Fills `links` and `summary`; returns the slow-network
// problems.
std::vector<Problem> test_network(std::vector<NetworkLink>& links, std::string& summary,
                                  const std::vector<TaskReport>& reports,
                                  const std::vector<std::pair<std::size_t, std::size_t>>& agents,
                                  const NetworkOptions& network, const NetworkAgent* own_agent);

// A node's side: runs the plan frame's `body` with `agent` and sends rank 0 the results on `fd`;
// returns when its tests end (the verdict comes after that).
Clock::time_point run_plan(int fd, const std::string& body, const NetworkAgent& agent);

}  // namespace dtlaunch::doctor
