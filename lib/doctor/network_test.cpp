#include "doctor/network_test.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <thread>

#include "doctor/network.hpp"
#include "doctor/network_agent.hpp"

namespace dtlaunch::doctor {
namespace {

// A node of the network test: the report that carries its agent's port, and the connection
// its plan goes out on (-1: rank 0's own agent, run in a thread).
struct TestedNode {
  std::size_t report;
  int fd;
};

// One node per node rank among those with an agent, in node rank order.
std::vector<TestedNode> tested_nodes(const std::vector<TaskReport>& reports,
                                     const std::vector<std::pair<std::size_t, std::size_t>>& agents,
                                     bool own_agent) {
  std::vector<TestedNode> nodes;
  std::set<std::uint32_t> node_ranks;
  if (own_agent && !reports.empty() && reports.front().network_test_port != 0) {
    nodes.push_back({0, -1});
    node_ranks.insert(reports.front().contract.node_rank);
  }
  for (const auto& [fd, report] : agents)
    if (node_ranks.insert(reports[report].contract.node_rank).second)
      nodes.push_back({report, static_cast<int>(fd)});
  std::sort(nodes.begin(), nodes.end(), [&](const TestedNode& a, const TestedNode& b) {
    return reports[a.report].contract.node_rank < reports[b.report].contract.node_rank;
  });
  return nodes;
}

// Each node's plan: its assigned peers (`peers`, plan_peers') and its time slot per peer,
// within the budget.
std::vector<NetworkPlan> network_plans(const std::vector<TestedNode>& nodes,
                                       const std::vector<TaskReport>& reports,
                                       const std::vector<std::vector<std::uint32_t>>& peers,
                                       const NetworkOptions& network) {
  const auto n = static_cast<std::uint32_t>(nodes.size());
  std::size_t rounds = 1;
  for (const auto& p : peers) rounds = std::max(rounds, p.size());
  const auto slot = std::chrono::duration_cast<std::chrono::milliseconds>(network.budget / rounds);
  auto address_of = [&](const TestedNode& node) {
    const TaskReport& r = reports[node.report];
    return node.fd < 0 ? r.contract.master_addr
                       : r.network.local_addr;  // where its check-in came from
  };
  std::vector<NetworkPlan> plans(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    plans[i] = {i, slot, {}};
    for (std::uint32_t j : peers[i])
      plans[i].peers.push_back(
          {j, address_of(nodes[j]), reports[nodes[j].report].network_test_port});
  }
  return plans;
}

// What the nodes whose plan went out send back by `gather_end`, as they sent it: judge_claims
// decides what of it to believe.
std::vector<NodeResults> gather_results(const std::vector<TestedNode>& nodes,
                                        std::vector<bool> pending, Clock::time_point gather_end) {
  const auto n = static_cast<std::uint32_t>(nodes.size());
  std::vector<NodeResults> results(n);
  std::vector<std::string> in(n);
  std::vector<pollfd> polled;
  while (std::count(pending.begin(), pending.end(), true) > 0 && Clock::now() < gather_end) {
    polled.clear();
    for (std::uint32_t i = 0; i < n; ++i)
      polled.push_back({pending[i] ? nodes[i].fd : -1, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), millis_until(gather_end, 200)) < 0 && errno != EINTR)
      break;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!pending[i] || !(polled[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t got = ::recv(nodes[i].fd, buffer, sizeof buffer, 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        pending[i] = false;
        continue;
      }
      in[i].append(buffer, static_cast<std::size_t>(got));
      try {
        if (auto body = take_frame(in[i], kResultMagic)) {
          pending[i] = false;
          results[i].results = decode_results(*body);
        }
      } catch (const std::exception& e) {
        pending[i] = false;
        results[i].unreadable = e.what();
      }
    }
  }
  return results;
}

}  // namespace

std::vector<Problem> test_network(std::vector<NetworkLink>& links, std::string& summary,
                                  const std::vector<TaskReport>& reports,
                                  const std::vector<std::pair<std::size_t, std::size_t>>& agents,
                                  const NetworkOptions& network, const NetworkAgent* own_agent) {
  const std::vector<TestedNode> nodes = tested_nodes(reports, agents, own_agent != nullptr);
  if (nodes.size() < 2) return {};
  const auto n = static_cast<std::uint32_t>(nodes.size());
  const auto assigned = plan_peers(n, network.random_peers);
  const std::vector<NetworkPlan> plans = network_plans(nodes, reports, assigned, network);
  const auto start = Clock::now();
  const auto end = start + network.budget;
  std::vector<bool> pending(n, false);
  for (std::uint32_t i = 0; i < n; ++i)
    if (nodes[i].fd >= 0)
      pending[i] = send_all(nodes[i].fd, frame(kPlanMagic, encode_plan(plans[i])),
                            start + std::chrono::seconds(1));
  std::vector<LinkResult> own_results;
  std::thread own;
  for (std::uint32_t i = 0; i < n; ++i)
    if (nodes[i].fd < 0) own = std::thread([&, i] { own_results = own_agent->run(plans[i], end); });
  std::vector<NodeResults> sent =
      gather_results(nodes, std::move(pending), end + std::chrono::seconds(2));
  if (own.joinable()) own.join();
  for (std::uint32_t i = 0; i < n; ++i)
    if (nodes[i].fd < 0) sent[i].results = std::move(own_results);
  std::vector<std::string> hosts;
  std::vector<std::uint32_t> ranks;
  for (const TestedNode& node : nodes) {
    hosts.push_back(reports[node.report].network.host);
    ranks.push_back(reports[node.report].contract.rank);
  }
  NetworkJudgement judgement = judge_claims(assigned, sent, hosts, ranks);
  for (const LinkResult& r : judgement.believed)
    links.push_back(
        {hosts[r.from], hosts[r.to], r.rtt_us, r.up_bytes_per_s, r.down_bytes_per_s, r.error});
  summary = summarize_network(judgement.believed, n);
  return std::move(judgement.problems);
}

Clock::time_point run_plan(int fd, const std::string& body, const NetworkAgent& agent) {
  const NetworkPlan plan = decode_plan(body);
  const Clock::time_point end =
      Clock::now() + plan.slot * static_cast<std::int64_t>(plan.peers.size());
  send_all(fd, frame(kResultMagic, encode_results(agent.run(plan, end))),
           end + std::chrono::seconds(2));
  return end;
}

}  // namespace dtlaunch::doctor
