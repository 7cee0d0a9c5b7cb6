// The DDP runtime as real processes on Gloo: 2 and 4 ranks of ddp_worker (DDP_WORKER).
#include <sstream>

#include "dtlaunch_catch.hpp"
#include "ranks.hpp"

using ddp_test::all_ranks;
using ddp_test::run_ranks;

namespace {

std::string describe(const ddp_test::RankRun& run) {
  std::ostringstream out;
  for (const auto& r : run.ranks)
    out << "--- rank " << r.rank << " status " << r.status << "\n" << r.output;
  return out.str();
}

void require_all_ok(const ddp_test::RankRun& run) {
  INFO(describe(run));
  for (const auto& r : run.ranks) {
    CHECK(r.status == 0);
    CHECK(r.output.find("FAIL") == std::string::npos);
  }
}

// The worker's "error-after-seconds: X" line, or a large value without one.
double error_after_seconds(const std::string& output) {
  const std::string key = "error-after-seconds: ";
  auto pos = output.find(key);
  return pos == std::string::npos ? 1e9 : std::stod(output.substr(pos + key.size()));
}

}  // namespace

TEST_CASE("collectives match their definitions", "[ddp][proc]") {
  for (int world : {2, 4}) {
    SECTION("world " + std::to_string(world)) {
      auto run = run_ranks(DDP_WORKER, {"collectives"}, world, all_ranks(world), {});
      require_all_ok(run);
      for (const auto& r : run.ranks) CHECK(r.output.find("checks, 0 failed") != std::string::npos);
    }
  }
}

TEST_CASE("DDP on a sharded batch follows one process on the whole batch", "[ddp][proc]") {
  for (int world : {2, 4}) {
    SECTION("world " + std::to_string(world)) {
      auto run = run_ranks(DDP_WORKER, {"train"}, world, all_ranks(world), {});
      require_all_ok(run);
      for (const auto& r : run.ranks) {
        for (const char* name : {"one-bucket", "several-buckets", "bucket-per-gradient",
                                 "no_sync-accumulation", "control-no-communication"})
          CHECK(r.output.find(name) != std::string::npos);
      }
    }
  }
}

TEST_CASE("unused parameters: an error by default, reduced as zeros on request", "[ddp][proc]") {
  auto run = run_ranks(DDP_WORKER, {"unused"}, 2, all_ranks(2), {});
  require_all_ok(run);
  for (const auto& r : run.ranks) {
    CHECK(r.output.find("unused-default rank") != std::string::npos);
    CHECK(r.output.find("unused-find rank") != std::string::npos);
  }
}

TEST_CASE("rendezvous: a missing rank is a timely error naming it", "[ddp][proc]") {
  const std::map<std::string, std::string> env{{"DDP_TEST_TIMEOUT_MS", "2000"}};
  struct Case {
    int world;
    std::vector<int> launch;
    std::string expected;  // in the output of every launched rank
  };
  const std::vector<Case> cases = {
      {2, {0}, "timed out after 2s: 1 of 2 ranks arrived; missing ranks: 1"},
      {4, {0, 2}, "timed out after 2s: 2 of 4 ranks arrived; missing ranks: 1,3"},
      {4, {0}, "timed out after 2s: 1 of 4 ranks arrived; missing ranks: 1-3"},
      {2, {1}, "could not reach the store that rank 0 hosts within 2s"},
  };
  for (const auto& c : cases) {
    auto run = run_ranks(DDP_WORKER, {"rendezvous"}, c.world, c.launch, env);
    INFO(describe(run));
    for (const auto& r : run.ranks) {
      // Bounded by the timeout, not twice it as TCPStore's own wait is.
      CHECK(error_after_seconds(r.output) < 3.5);
      CHECK(r.status == 3);
      CHECK(r.output.find("ERROR: dtlaunch ddp: ") != std::string::npos);
      CHECK(r.output.find(c.expected) != std::string::npos);
      CHECK(r.output.find("127.0.0.1:") != std::string::npos);
    }
  }
}

TEST_CASE("a rank that leaves makes the peer's collective fail, not hang", "[ddp][proc]") {
  auto run =
      run_ranks(DDP_WORKER, {"peer-exit"}, 2, all_ranks(2), {{"DDP_TEST_TIMEOUT_MS", "5000"}});
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 2);
  for (const auto& r : run.ranks) {
    if (r.rank == 0) {
      CHECK(r.status == 3);
      CHECK(r.output.find("ERROR: dtlaunch ddp: gloo all_reduce on rank 0 of 2 failed: ") !=
            std::string::npos);
    } else {
      CHECK(r.status == 0);
    }
  }
  CHECK(error_after_seconds(run.ranks[0].output) < 5.0);
}

TEST_CASE("a MASTER_ADDR that does not resolve is named in the error", "[ddp][proc]") {
  auto run = run_ranks(DDP_WORKER, {"rendezvous"}, 2, {1},
                       {{"MASTER_ADDR", "no-such-host.invalid"}, {"DDP_TEST_TIMEOUT_MS", "2000"}});
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 1);
  CHECK(run.ranks[0].status == 3);
  // At once when the resolver says the name does not exist; at the deadline, with the same
  // words, where no resolver answers.
  CHECK(run.ranks[0].output.find("cannot resolve MASTER_ADDR 'no-such-host.invalid'") !=
        std::string::npos);
}

TEST_CASE("a malformed launch environment is a one-line error naming the variables",
          "[ddp][proc]") {
  auto run = run_ranks(DDP_WORKER, {"rendezvous"}, 2, {0}, {{"MASTER_PORT", "http"}});
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 1);
  CHECK(run.ranks[0].status == 3);
  CHECK(run.ranks[0].output.find("MASTER_PORT='http' is not an integer") != std::string::npos);
}
