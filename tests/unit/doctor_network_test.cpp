// The doctor's network test (lib/doctor/network.hpp): who tests whom, the wire forms, the outlier
// statistics on hand-made results, and two real agents on loopback.
#include <algorithm>
#include <functional>
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

// What each node sends rank 0 when all are honest: the results of its own tests.
std::vector<NodeResults> sent_by_nodes(const std::vector<LinkResult>& results, std::uint32_t n) {
  std::vector<NodeResults> sent(n);
  for (const LinkResult& r : results) sent[r.from].results.push_back(r);
  return sent;
}

// The honest node a liar (node 0) tries to get excluded, and what it sends instead of its
// results; a Liar makes one from the plan and what node 0 would have sent.
struct Lie {
  std::uint32_t victim;
  std::vector<LinkResult> sent;
};
using Liar = std::function<Lie(const std::vector<std::vector<std::uint32_t>>& assigned,
                               const std::vector<LinkResult>& honest, std::uint32_t n)>;

// A test by `from` of `to` that says `to` sends at 1 kB/s, the rest healthy: the lie that drags
// `to` alone, where one slow every way (below) drags the liar's own median and the job's too.
LinkResult slow_link(std::uint32_t from, std::uint32_t to) {
  return {from, to, 20, 10e9, 1000, ""};
}

// A node that node 0's plan does not pair it with (node 0 is paired with few of them).
std::uint32_t outside_plan(const std::vector<std::vector<std::uint32_t>>& assigned,
                           std::uint32_t n) {
  for (std::uint32_t j = n - 1; j > 0; --j)
    if (std::find(assigned[0].begin(), assigned[0].end(), j) == assigned[0].end()) return j;
  return 0;
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
    // From four nodes on, every node is on links to three peers or more, so that one lying
    // peer cannot move the median of its links (judge_network).
    std::vector<std::set<std::uint32_t>> linked(n);
    for (std::uint32_t i = 0; i < n; ++i)
      for (std::uint32_t j : peers[i]) {
        linked[i].insert(j);
        linked[j].insert(i);
      }
    if (n >= 4)
      for (const auto& l : linked) CHECK(l.size() >= 3);
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

TEST_CASE("doctor network: one lying node cannot get an honest node excluded") {
  struct Case {
    const char* lie;
    Liar liar;
    const char* refused;  // what the refusal line says; "" when nothing is refused
  };
  const std::vector<Case> cases = {
      {"its assigned test of the victim: the victim sends slowly",
       [](const auto& assigned, auto honest, std::uint32_t) {
         honest.front() = slow_link(0, assigned[0].front());
         return Lie{assigned[0].front(), honest};
       },
       ""},
      {"its assigned test of the victim, slow every way",
       [](const auto& assigned, auto honest, std::uint32_t) {
         honest.front() = {0, assigned[0].front(), 900000, 1000, 1000, ""};
         return Lie{assigned[0].front(), honest};
       },
       ""},
      {"its assigned test of the victim, could not connect",
       [](const auto& assigned, auto honest, std::uint32_t) {
         honest.front() = {0, assigned[0].front(), 0, 0, 0, "cannot connect to x:1: refused"};
         return Lie{assigned[0].front(), honest};
       },
       ""},
      {"the slow test of the victim 60 times",
       [](const auto& assigned, auto honest, std::uint32_t) {
         honest.front() = slow_link(0, assigned[0].front());
         honest.insert(honest.end(), 59, honest.front());
         return Lie{assigned[0].front(), honest};
       },
       " repeating a peer"},
      {"slow tests of a node outside its plan",
       [](const auto& assigned, auto honest, std::uint32_t n) {
         const std::uint32_t victim = outside_plan(assigned, n);
         honest.insert(honest.end(), 3, slow_link(0, victim));
         return Lie{victim, honest};
       },
       " about peers outside its plan"},
      {"slow tests of the victim in the name of every other node",
       [](const auto& assigned, auto honest, std::uint32_t n) {
         const std::uint32_t victim = assigned[0].front();
         for (std::uint32_t i = 1; i < n; ++i)
           if (i != victim) honest.push_back(slow_link(i, victim));
         return Lie{victim, honest};
       },
       " about other nodes' tests"},
      {"64 results, every kind of claim",
       [](const auto& assigned, auto honest, std::uint32_t n) {
         const std::uint32_t victim = assigned[0].front();
         honest.front() = slow_link(0, victim);
         while (honest.size() < 64)
           for (std::uint32_t i = 0; i < n && honest.size() < 64; ++i)
             if (i != victim) honest.push_back(slow_link(i, victim));
         return Lie{victim, honest};
       },
       "sent 64 network results for its "},
  };
  for (std::uint32_t n : {3u, 4u, 16u, 1000u})
    for (const Case& c : cases) {
      CAPTURE(n, c.lie);
      const auto assigned = plan_peers(n, 2);
      const std::vector<LinkResult> honest = measured(n, 1.5);
      std::vector<NodeResults> sent = sent_by_nodes(honest, n);
      const Lie lie = c.liar(assigned, sent[0].results, n);
      CAPTURE(lie.victim);
      sent[0].results = lie.sent;
      const NetworkJudgement judged = judge_claims(assigned, sent, hosts_of(n), ranks_of(n));
      std::vector<std::string> refusals;
      for (const Problem& p : judged.problems) {
        CAPTURE(p.message);
        CHECK(p.severity == Severity::kWarning);  // nobody excluded, the victim least of all
        if (p.kind != "network-results-refused") continue;
        CHECK(p.hosts == std::vector<std::string>{"node1"});  // the liar, named
        refusals.push_back(p.message);
      }
      CHECK(refusals.size() == (*c.refused ? 1u : 0u));
      if (*c.refused && !refusals.empty()) CHECK(refusals[0].find(c.refused) != std::string::npos);
      // What is believed is what the plan asked for, once: a test per assigned pair at most.
      std::set<std::pair<std::uint32_t, std::uint32_t>> pairs;
      for (const LinkResult& r : judged.believed) {
        CHECK(std::count(assigned[r.from].begin(), assigned[r.from].end(), r.to) == 1);
        CHECK(pairs.insert({r.from, r.to}).second);
      }
    }
}

TEST_CASE("doctor network: results that cannot be read are refused whole and named") {
  std::string many;
  for (int i = 0; i < 65; ++i) many += "link 0 1 20 1000 1000 \n";
  CHECK_THROWS_WITH(decode_results(many), Catch::Contains("more than 64"));
  const auto assigned = plan_peers(4, 2);
  std::vector<NodeResults> sent = sent_by_nodes(measured(4, 1.5), 4);
  sent[2] = {{slow_link(2, 3)}, "doctor network results: more than 64"};
  const NetworkJudgement judged = judge_claims(assigned, sent, hosts_of(4), ranks_of(4));
  REQUIRE(judged.problems.size() == 1);
  CHECK(judged.problems[0].kind == "network-results-refused");
  CHECK(judged.problems[0].message ==
        "node3 sent network results that could not be read (doctor network results: more than "
        "64): all refused. Refused results are not judged");
  for (const LinkResult& r : judged.believed) CHECK(r.from != 2);
}

TEST_CASE("doctor network: a throttled node is still named through the plan's check") {
  for (std::uint32_t n : {3u, 4u, 16u}) {
    auto results = measured(n, 1.5);
    for (LinkResult& r : results) {
      if (r.from == 1) r.up_bytes_per_s = 1e6;
      if (r.to == 1) r.down_bytes_per_s = 1e6;
    }
    const NetworkJudgement judged =
        judge_claims(plan_peers(n, 2), sent_by_nodes(results, n), hosts_of(n), ranks_of(n));
    REQUIRE(judged.problems.size() == 1);
    CHECK(judged.problems[0].severity == Severity::kError);
    CHECK(judged.problems[0].hosts == std::vector<std::string>{"node2"});
    CHECK(judged.believed.size() == results.size());
  }
}

TEST_CASE("doctor network: one peer that cannot connect is a warning, not an exclusion") {
  // Three nodes: node3 is tested by node2 alone, whose word cannot be told from a lie.
  auto results = measured(3, 1.5);
  for (LinkResult& r : results)
    if (r.to == 2) r = {r.from, 2, 0, 0, 0, "cannot connect to node3:4000: Connection refused"};
  const auto problems = judge_network(results, hosts_of(3), ranks_of(3));
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].severity == Severity::kWarning);
  CHECK(problems[0].hosts == std::vector<std::string>{"node3"});
  CHECK(problems[0].message.find("node3 could not be reached by node2 (cannot connect") == 0);
}

TEST_CASE("doctor network: whatever one node makes of its links, no other node is excluded") {
  // From four nodes on (three is docs/doctor.md's limit: the one link that does not touch a node
  // is on the liar's, and can be claimed fast enough to make the node's others look slow).
  // Node 0 lies on every test it is on: as the tester, any numbers (or a failed connection); as
  // the tested, any acknowledged upload time, and really slow answers (it cannot make a link
  // faster than it is for its peer's clock). Drawn at random among the choices, many times.
  const double rates[] = {1e3, 10e9, 1e16};
  for (std::uint32_t n : {4u, 5u, 8u, 16u, 64u}) {
    const auto assigned = plan_peers(n, 2);
    std::mt19937_64 random(n);
    auto pick = [&](std::size_t k) { return static_cast<std::size_t>(random() % k); };
    for (int draw = 0; draw < 3000; ++draw) {
      auto results = measured(n, 1.5, static_cast<std::uint64_t>(draw));
      for (LinkResult& r : results) {
        if (r.from == 0) {
          r = {0, r.to, pick(2) ? 20.0 : 1e6, rates[pick(3)], rates[pick(3)], ""};
          if (pick(6) == 0) r = {0, r.to, 0, 0, 0, "cannot connect to x:1: refused"};
        } else if (r.to == 0) {
          r.up_bytes_per_s = rates[pick(3)];
          if (pick(2)) r.down_bytes_per_s = 1e3;
          if (pick(2)) r.rtt_us = 1e6;
          if (pick(6) == 0) r = {r.from, 0, 0, 0, 0, "cannot connect to x:1: refused"};
        }
      }
      const auto problems = judge_network(results, hosts_of(n), ranks_of(n));
      for (const Problem& p : problems) {
        CAPTURE(n, draw, p.message);
        if (p.severity == Severity::kError) CHECK(p.hosts == std::vector<std::string>{"node1"});
      }
    }
  }
}
