// The doctor's network test (lib/doctor/network.hpp): who tests whom, the wire forms, the outlier
// statistics on hand-made results, and two real agents on loopback.
#include <algorithm>
#include <random>
#include <set>

#include "doctor/network.hpp"
#include "doctor/network_agent.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch::doctor;

namespace {

std::vector<std::string> hosts_of(std::uint32_t n) {
  std::vector<std::string> hosts;
  for (std::uint32_t i = 0; i < n; ++i) hosts.push_back("node" + std::to_string(i + 1));
  return hosts;
}

std::vector<std::uint32_t> ranks_of(std::uint32_t n) {
  std::vector<std::uint32_t> ranks;
  for (std::uint32_t i = 0; i < n; ++i) ranks.push_back(8 * i);
  return ranks;
}

// Every planned test of n nodes, with rates drawn around 10 GB/s and round trips around 20 us
// by a fixed generator that spreads them over a factor of `noise` either way.
std::vector<LinkResult> measured(std::uint32_t n, double noise, std::uint64_t seed = 1) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> factor(1.0 / noise, noise);
  std::vector<LinkResult> results;
  const auto peers = plan_peers(n, 2);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t j : peers[i])
      results.push_back(
          {i, j, 20 * factor(random), 10e9 * factor(random), 10e9 * factor(random), ""});
  return results;
}

}  // namespace

TEST_CASE("doctor network: ring neighbours and seeded random peers, O(nodes) tests") {
  for (std::uint32_t n : {2u, 3u, 4u, 10u, 1000u, 16384u}) {
    const auto peers = plan_peers(n, 2);
    REQUIRE(peers.size() == n);
    std::set<std::pair<std::uint32_t, std::uint32_t>> pairs;
    std::size_t tests = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      CHECK(peers[i].size() <= 3);
      if (n > 2) CHECK(peers[i].front() == (i + 1) % n);  // the ring neighbour first
      for (std::uint32_t j : peers[i]) {
        CHECK(j != i);
        CHECK(pairs.insert({std::min(i, j), std::max(i, j)}).second);  // never twice
        ++tests;
      }
    }
    CHECK(tests <= 3 * static_cast<std::size_t>(n));
    if (n >= 10) CHECK(tests >= 2 * static_cast<std::size_t>(n));  // random peers were found
    CHECK(plan_peers(n, 2) == peers);  // the same job tests the same pairs
  }
}

TEST_CASE("doctor network: the median and the scaled MAD") {
  const Spread s = robust_spread({1, 2, 3, 4, 100});
  CHECK(s.median == 3);
  CHECK(s.sigma == Approx(1.4826));
  CHECK(robust_spread({}).median == 0);
  CHECK(robust_spread({5, 7}).median == 6);
}

TEST_CASE("doctor network: plans and results survive the wire form") {
  const NetworkPlan plan{
      3, std::chrono::milliseconds(667), {{4, "10.0.0.5", 40001}, {9, "fe80::1%eth0", 40002}}};
  const NetworkPlan back = decode_plan(encode_plan(plan));
  CHECK(back.node == 3);
  CHECK(back.slot == plan.slot);
  REQUIRE(back.peers.size() == 2);
  CHECK(back.peers[1].address == "fe80::1%eth0");
  CHECK(back.peers[1].port == 40002);
  const std::vector<LinkResult> results = {{3, 4, 21, 1.5e9, -1, ""},
                                           {3, 9, 0, 0, 0, "cannot connect to x:1: refused"}};
  CHECK(decode_results(encode_results(results)) ==
        std::vector<LinkResult>{{3, 4, 21, 1500000000, -1, ""},
                                {3, 9, 0, 0, 0, "cannot connect to x:1: refused"}});
  CHECK_THROWS(decode_plan("peer x 1 a\n"));
  CHECK_THROWS(decode_results("link 1 2\n"));
}

TEST_CASE("doctor network: a healthy noisy run flags nothing") {
  // Rates and round trips spread over 2.5x either way (a loaded shared machine), many seeds.
  for (std::uint32_t n : {3u, 4u, 16u, 1000u})
    for (std::uint64_t seed = 1; seed <= 50; ++seed)
      CHECK(judge_network(measured(n, 2.5, seed), hosts_of(n), ranks_of(n)).empty());
}

TEST_CASE("doctor network: a node whose sending is throttled is named, and only it") {
  for (std::uint32_t n : {3u, 4u, 16u, 1000u}) {
    auto results = measured(n, 1.5);
    const std::uint32_t slow = n / 2;
    for (LinkResult& r : results) {
      if (r.from == slow) r.up_bytes_per_s = 1e6;
      if (r.to == slow) r.down_bytes_per_s = 1e6;
    }
    const auto problems = judge_network(results, hosts_of(n), ranks_of(n));
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].kind == "slow-network");
    CHECK(problems[0].severity == Severity::kError);
    CHECK(problems[0].hosts == std::vector<std::string>{"node" + std::to_string(slow + 1)});
    CHECK(problems[0].ranks == std::vector<std::uint32_t>{8 * slow});
    CHECK(problems[0].message.find(" sends at 1.0 MB/s against the job's ") != std::string::npos);
  }
}

TEST_CASE("doctor network: a throttled node among noisy links of a small job") {
  // Three nodes, the healthy directions spread 9x (a loaded machine), node2's ~500x below:
  // the two slow directions inflate the MAD of six, but not past the 50x cap.
  const std::vector<LinkResult> results = {
      {0, 1, 14, 3.5e9, 0.95e6, ""}, {1, 2, 14, 0.94e6, 0.4e9, ""}, {2, 0, 14, 0.6e9, 2.8e9, ""}};
  const auto problems = judge_network(results, hosts_of(3), ranks_of(3));
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].hosts == std::vector<std::string>{"node2"});
  NetworkLimits uncapped;  // the MAD alone lets it through: what the cap is for
  uncapped.max_rate_ratio = 1e9;
  CHECK(judge_network(results, hosts_of(3), ranks_of(3), uncapped).empty());
}

TEST_CASE("doctor network: a throttled node slows what it receives too, and is still named") {
  // Two runs of the Slurm scenario (node2's egress throttled to 8 Mbit/s by tc tbf), as
  // measured: node2's acknowledgements queue behind its own data, so what node1 and node3 send
  // it is slow as well (3.8 and 4.5 MB/s), and four of the six directions touch node2. A median
  // over directions fell to node2's level and named nobody; over nodes, node2 weighs as one.
  const std::vector<std::vector<LinkResult>> runs = {{{1, 2, 25, 1013322, 4516411, ""},
                                                      {2, 0, 17, 1296664749, 1348741442, ""},
                                                      {0, 1, 24, 129503346, 1009017, ""}},
                                                     {{1, 2, 24, 1013411, 654617290, ""},
                                                      {2, 0, 25, 1241306894, 1214346607, ""},
                                                      {0, 1, 12957, 3763049, 797299, ""}}};
  for (const auto& results : runs) {
    const auto problems = judge_network(results, hosts_of(3), ranks_of(3));
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].hosts == std::vector<std::string>{"node2"});
    CAPTURE(problems[0].message);
    CHECK(problems[0].message.find("node2 sends at ") == 0);
    CHECK(problems[0].message.find("B/s against the job's ") != std::string::npos);
  }
}

TEST_CASE("doctor network: a node that answers late, or not at all") {
  auto results = measured(16, 1.5);
  for (LinkResult& r : results)
    if (r.from == 5 || r.to == 5) r.rtt_us = 5000;  // 5 ms against 20 us
  for (LinkResult& r : results)
    if (r.to == 9) r = {r.from, 9, 0, 0, 0, "cannot connect to node10:4000: Connection refused"};
  const auto problems = judge_network(results, hosts_of(16), ranks_of(16));
  std::vector<std::string> hosts;
  for (const Problem& p : problems) hosts.push_back(p.hosts.front());
  CHECK(hosts == std::vector<std::string>{"node6", "node10"});
  CHECK(problems[0].message.find("answers in 5 ms") != std::string::npos);
  CHECK(problems[1].message.find("node10 cannot be reached by ") == 0);
}

TEST_CASE("doctor network: when most tests cannot connect, no node is blamed") {
  auto results = measured(16, 1.5);
  for (std::size_t i = 0; i < results.size(); ++i)
    if (i % 4 != 0)
      results[i] = {results[i].from, results[i].to, 0, 0, 0, "cannot connect to x: refused"};
  const auto problems = judge_network(results, hosts_of(16), ranks_of(16));
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].kind == "network-test-failed");
  CHECK(problems[0].severity == Severity::kWarning);
  CHECK(problems[0].hosts.empty());
}

TEST_CASE("doctor network: two nodes cannot tell which end is slow") {
  std::vector<LinkResult> results = {{0, 1, 20, 1e6, 10e9, ""}};
  CHECK(judge_network(results, hosts_of(2), ranks_of(2)).empty());
}

TEST_CASE("doctor network: real agents on loopback measure each other within the budget") {
  auto a = NetworkAgent::start();
  auto b = NetworkAgent::start();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->port() != b->port());
  const auto start = Clock::now();
  const NetworkPlan plan{0, std::chrono::milliseconds(300), {{1, "127.0.0.1", b->port()}}};
  const auto results = a->run(plan, start + std::chrono::milliseconds(300));
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  REQUIRE(results.size() == 1);
  CHECK(results[0].error == "");
  CHECK(results[0].rtt_us > 0);
  CHECK(results[0].up_bytes_per_s > 1e6);
  CHECK(results[0].down_bytes_per_s > 1e6);
  CHECK(took < 1.0);  // bounded by the plan, not by the loopback's speed
  // A peer that is not there: an error, zero rates, within the slot.
  b.reset();
  const auto gone = a->run(plan, Clock::now() + std::chrono::milliseconds(300));
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].error.find("cannot connect") == 0);
  CHECK(gone[0].up_bytes_per_s == 0);
}

TEST_CASE("doctor network: the table's one line") {
  const std::vector<LinkResult> results = {
      {0, 1, 20, 2e9, 1e9, ""},
      {1, 2, 40, 3e9, -1, ""},
      {2, 0, 0, 0, 0, "cannot connect to node1:4000: refused"}};
  CHECK(summarize_network(results, 3) ==
        "3 tests between 3 nodes, throughput median 2.00 GB/s (1.00 GB/s to 3.00 GB/s), round "
        "trip median 30 us, 1 could not connect");
  CHECK(summarize_network({}, 3).empty());
}
