// The heartbeat's shell on real sockets: a few nodes on the loopback, one of them stopping
// without a word, saying goodbye, or (in a child process) being frozen with SIGSTOP.
#include "heartbeat/node.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>

#include "dtlaunch_catch.hpp"

using namespace dtlaunch::heartbeat;
using std::chrono::milliseconds;

namespace {

struct Cluster {
  std::vector<Listener> listeners;
  std::map<int, Endpoint> endpoints;
  explicit Cluster(int world) {
    for (int r = 0; r < world; ++r) {
      listeners.emplace_back();
      endpoints[r] = Endpoint{"127.0.0.1", listeners.back().port(), "host" + std::to_string(r)};
    }
  }
  NodeOptions options(int rank, int timeout_ms) {
    NodeOptions o;
    o.self = rank;
    o.world = static_cast<int>(listeners.size());
    o.settings.timeout = milliseconds(timeout_ms);
    o.settings.interval = milliseconds(timeout_ms / 5);
    o.tag = 0x5eed;
    o.endpoints = endpoints;
    o.position = [rank] { return Position{static_cast<uint64_t>(100 + rank), 1}; };
    return o;
  }
};

std::vector<std::unique_ptr<Node>> start_all(Cluster& c, int timeout_ms) {
  std::vector<std::unique_ptr<Node>> nodes;
  for (size_t r = 0; r < c.listeners.size(); ++r)
    nodes.push_back(std::make_unique<Node>(c.options(static_cast<int>(r), timeout_ms),
                                           std::move(c.listeners[r])));
  return nodes;
}

// Waits up to `limit` for every node to have a verdict; returns the time it took.
milliseconds wait_for_verdicts(const std::vector<Node*>& nodes, milliseconds limit) {
  const auto start = Clock::now();
  while (Clock::now() - start < limit) {
    bool all = true;
    for (const Node* n : nodes) all = all && n->any_lost();
    if (all) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

}  // namespace

TEST_CASE("a node that stops without goodbye is seen exited by the others at once", "[proc]") {
  Cluster c(4);
  auto nodes = start_all(c, 3000);
  std::this_thread::sleep_for(milliseconds(300));
  for (const auto& n : nodes) CHECK_FALSE(n->any_lost());
  nodes[2]->stop(false);
  const auto took =
      wait_for_verdicts({nodes[0].get(), nodes[1].get(), nodes[3].get()}, milliseconds(5000));
  CHECK(took < milliseconds(1000));
  for (int r : {0, 1, 3}) {
    const auto vs = nodes[static_cast<size_t>(r)]->verdicts();
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].rank == 2);
    CHECK(vs[0].how == How::kExited);
    CHECK(vs[0].last.seq == 102);
  }
}

TEST_CASE("a node that says goodbye is no loss", "[proc]") {
  Cluster c(3);
  auto nodes = start_all(c, 1000);
  std::this_thread::sleep_for(milliseconds(200));
  nodes[1].reset();  // goodbye
  std::this_thread::sleep_for(milliseconds(1800));
  CHECK_FALSE(nodes[0]->any_lost());
  CHECK_FALSE(nodes[2]->any_lost());
}

TEST_CASE("a frozen process is seen frozen after the timeout, not before", "[proc]") {
  Cluster c(3);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    {
      Node n(c.options(2, 1000), std::move(c.listeners[2]));
      ::pause();
    }
    ::_exit(0);
  }
  ::close(c.listeners[2].release());  // the child's listener stays the child's alone
  Node n0(c.options(0, 1000), std::move(c.listeners[0]));
  Node n1(c.options(1, 1000), std::move(c.listeners[1]));
  std::this_thread::sleep_for(milliseconds(1500));
  CHECK_FALSE(n0.any_lost());
  CHECK_FALSE(n1.any_lost());
  ::kill(child, SIGSTOP);
  const auto took = wait_for_verdicts({&n0, &n1}, milliseconds(4000));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(took >= milliseconds(700));
  CHECK(took < milliseconds(1600));
  for (const Node* n : {&n0, &n1}) {
    const auto vs = n->verdicts();
    REQUIRE(!vs.empty());
    CHECK(vs[0].rank == 2);
    CHECK(vs[0].how == How::kFrozen);
    CHECK(vs[0].seen_by == 1);
  }
}

// During start-up a rank knows a successor's endpoint only once that rank has published it: until
// then the successor is not watched (no alarm however long it takes), and from then on its loss
// is seen.
TEST_CASE("a successor whose endpoint comes late is watched from then on", "[proc]") {
  Cluster c(3);
  auto without = [&](int rank, std::initializer_list<int> unknown) {
    NodeOptions o = c.options(rank, 1000);
    for (const int r : unknown) o.endpoints.erase(r);
    return o;
  };
  Node n0(without(0, {1, 2}), std::move(c.listeners[0]));
  Node n2(without(2, {1}), std::move(c.listeners[2]));
  std::this_thread::sleep_for(milliseconds(2500));  // 2.5 timeouts: rank 1 has not started
  CHECK_FALSE(n0.any_lost());
  CHECK_FALSE(n2.any_lost());
  auto n1 = std::make_unique<Node>(without(1, {}), std::move(c.listeners[1]));
  n0.add_endpoints({{1, c.endpoints[1]}, {2, c.endpoints[2]}});
  n2.add_endpoints({{1, c.endpoints[1]}});
  std::this_thread::sleep_for(milliseconds(300));
  CHECK_FALSE(n0.any_lost());
  n1->stop(false);
  const auto took = wait_for_verdicts({&n0, &n2}, milliseconds(3000));
  CHECK(took < milliseconds(1000));
  for (const Node* n : {&n0, &n2}) {
    const auto vs = n->verdicts();
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].rank == 1);
    CHECK(vs[0].how == How::kExited);
  }
}

// slurm.watch's false alarm (issue 21): ranks 0, 3 and 2 end in that order. 0's goodbye reaches
// its neighbours 3 and 1; 3's reaches 2, which then watches 0, a rank whose goodbye it never
// heard and whose listener is closed.
TEST_CASE("ranks that end one after the other are no loss", "[proc]") {
  Cluster c(4);
  auto nodes = start_all(c, 1000);
  std::this_thread::sleep_for(milliseconds(300));
  nodes[0].reset();
  std::this_thread::sleep_for(milliseconds(100));
  nodes[3].reset();
  std::this_thread::sleep_for(milliseconds(400));
  CHECK(nodes[1]->verdicts().empty());
  CHECK(nodes[2]->verdicts().empty());
}

// Not in the suite (hidden, 10 s): 60 rounds of 4 nodes ending in a random order within 30 ms,
// each destroyed right after it stops (its listener closes, as when the process exits); counts the
// endings that had raised a verdict. Run: heartbeat_tests "[stress]".
TEST_CASE("ranks ending together in random orders raise no alarm", "[.stress]") {
  std::mt19937 random(42);
  std::atomic<int> alarms{0};
  const int rounds = 60;
  for (int round = 0; round < rounds; ++round) {
    Cluster c(4);
    auto nodes = start_all(c, 1000);
    std::this_thread::sleep_for(milliseconds(150));
    std::vector<std::thread> enders;
    for (auto& node : nodes) {
      const milliseconds delay(random() % 30);
      enders.emplace_back([&node, delay, &alarms] {
        std::this_thread::sleep_for(delay);
        node->stop(true);
        if (node->any_lost()) ++alarms;
        node.reset();
      });
    }
    for (auto& t : enders) t.join();
  }
  WARN("endings with a verdict: " << alarms << " of " << rounds * 4);
  CHECK(alarms == 0);
}
