// The DDP runtime as real processes on Gloo: 2 and 4 ranks of ddp_worker (DDP_WORKER).
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dtlaunch_catch.hpp"
#include "proc/supervisor.hpp"
#include "ranks.hpp"
#include "test_support.hpp"

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

// A TCP port on 127.0.0.1 that accepts connections (the kernel completes them from the backlog)
// and never answers: what a rank finds when MASTER_PORT belongs to another program that waits
// for its own protocol, as an HTTP server waits for a request line.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The ranks of one job on a given port, started now, with extra variables.
std::unique_ptr<dtlaunch_test::Ranks> start_job(const dtlaunch_test::TempDir& dir,
                                                const std::string& tag, int world,
                                                std::vector<int> launch, int port,
                                                std::map<std::string, std::string> env) {
  env["MASTER_PORT"] = std::to_string(port);
  env["OMP_NUM_THREADS"] = "1";
  return std::make_unique<dtlaunch_test::Ranks>(
      DDP_WORKER, std::vector<std::string>{"rendezvous"}, world, dir.path(), tag,
      dtlaunch_test::RankOptions{std::move(launch), std::move(env)});
}

// The shm all_reduce's segment as a rank's "shm-segment: " line names it: "/dev/shm/NAME" while
// the rank ran, "" when it used none.
std::string shm_segment(const std::string& output) {
  const std::string key = "shm-segment: ";
  const auto at = output.find(key);
  if (at == std::string::npos) return "";
  const std::string line = output.substr(at + key.size(), output.find('\n', at) - at - key.size());
  return line == "none" ? "" : line.substr(0, line.find(' '));
}

// Every rank mapped one segment, already unlinked while it ran, and gone after the run; or, with
// shm off, none.
void check_shm_segments(const ddp_test::RankRun& run, bool shm_on) {
  INFO(describe(run));
  std::string first;
  for (const auto& r : run.ranks) {
    const std::string path = shm_segment(r.output);
    if (!shm_on) {
      CHECK(r.output.find("shm-segment: none") != std::string::npos);
      continue;
    }
    CHECK(path.rfind("/dev/shm/dtlaunch-ddp-", 0) == 0);
    CHECK(r.output.find(path + " (deleted)") != std::string::npos);
    CHECK(!std::filesystem::exists(path));
    if (first.empty()) first = path;
    CHECK(path == first);
  }
}

std::map<std::string, std::string> shm_env(bool on, std::map<std::string, std::string> env = {}) {
  env["DTLAUNCH_DDP_SHM"] = on ? "1" : "0";
  return env;
}

}  // namespace

TEST_CASE("collectives match their definitions", "[ddp][proc]") {
  for (int world : {2, 4}) {
    for (bool shm : {true, false}) {
      SECTION("world " + std::to_string(world) + (shm ? ", shm all_reduce" : ", gloo all_reduce")) {
        auto run = run_ranks(DDP_WORKER, {"collectives"}, world, all_ranks(world), shm_env(shm));
        require_all_ok(run);
        for (const auto& r : run.ranks)
          CHECK(r.output.find("checks, 0 failed") != std::string::npos);
        check_shm_segments(run, shm);
      }
    }
  }
}

TEST_CASE("DDP on a sharded batch follows one process on the whole batch", "[ddp][proc]") {
  for (auto [world, shm] : {std::pair{2, true}, std::pair{4, true}, std::pair{2, false}}) {
    SECTION("world " + std::to_string(world) + (shm ? ", shm all_reduce" : ", gloo all_reduce")) {
      auto run = run_ranks(DDP_WORKER, {"train"}, world, all_ranks(world), shm_env(shm));
      require_all_ok(run);
      check_shm_segments(run, shm);
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
      // The peer is gone: kPeerLost naming it (it published nothing), or kTimeout.
      CHECK(r.output.find("ERROR: dtlaunch ddp: all_reduce #1 (float32, 1000 elements) ") !=
            std::string::npos);
      CHECK(r.output.find("rank 1 (") != std::string::npos);
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

TEST_CASE("rendezvous: a port served by something else is an error naming it, by the deadline",
          "[ddp][proc]") {
  SilentListener other;
  auto run =
      run_ranks(DDP_WORKER, {"rendezvous"}, 2, {1},
                {{"MASTER_PORT", std::to_string(other.port())}, {"DDP_TEST_TIMEOUT_MS", "2000"}},
                std::chrono::seconds(20));
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 1);
  CHECK(run.ranks[0].status == 3);
  CHECK(error_after_seconds(run.ranks[0].output) < 3.5);
  CHECK(run.ranks[0].output.find("rendezvous at 127.0.0.1:" + std::to_string(other.port()) +
                                 " failed: rank 1 connected, but the peer there did not answer "
                                 "within 2s (is MASTER_PORT another program's port") !=
        std::string::npos);
}

TEST_CASE("rendezvous: rank 0 with a MASTER_ADDR that does not resolve fails at once",
          "[ddp][proc]") {
  auto run = run_ranks(DDP_WORKER, {"rendezvous"}, 2, {0},
                       {{"MASTER_ADDR", "no-such-host.invalid"}, {"DDP_TEST_TIMEOUT_MS", "20000"}},
                       std::chrono::seconds(40));
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 1);
  CHECK(run.ranks[0].status == 3);
  CHECK(error_after_seconds(run.ranks[0].output) < 3.0);
  CHECK(run.ranks[0].output.find("rank 0 cannot resolve MASTER_ADDR 'no-such-host.invalid'") !=
        std::string::npos);
}

TEST_CASE("rendezvous: a rank of another job is refused on both sides, naming both runs",
          "[ddp][proc]") {
  dtlaunch_test::TempDir dir("ddp-test");
  // One port per case: each case's store must be new.
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) ports.push_back(dtlaunch::find_free_port("127.0.0.1"));
  struct Case {
    std::string name;
    std::map<std::string, std::string> a_env, b_env;
    std::string expected;
  };
  auto at = [&](size_t i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  const std::vector<Case> cases = {
      {"run ids differ",
       {{"DTLAUNCH_RUN_ID", "slurm-1234.0"}},
       {{"DTLAUNCH_RUN_ID", "slurm-1235.0"}},
       "rank 1 of run 'slurm-1235.0' (world 2) reached the rendezvous at " + at(0) +
           " of run 'slurm-1234.0' (world 2): two jobs share MASTER_ADDR:MASTER_PORT"},
      {"one run id unset",
       {{"DTLAUNCH_RUN_ID", "local-4711-9f3a"}},
       {},
       "rank 1 of run '' (world 2) reached the rendezvous at " + at(1) +
           " of run 'local-4711-9f3a' (world 2)"},
      {"world sizes differ",
       {},
       {{"WORLD_SIZE", "3"}},
       "rank 1 of run '' (world 3) reached the rendezvous at " + at(2) + " of run '' (world 2)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int port = ports[i];
    INFO(c.name);
    auto env_a = c.a_env;
    env_a["DDP_TEST_TIMEOUT_MS"] = "20000";
    auto env_b = c.b_env;
    env_b["DDP_TEST_TIMEOUT_MS"] = "20000";
    auto a = start_job(dir, "a", 2, {0}, port, env_a);
    // Job A's rank 0 hosts the store first, as in the accident this guards against.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto b = start_job(dir, "b", 2, {1}, port, env_b);
    const auto sa = a->wait_all(std::chrono::seconds(15));
    const auto sb = b->wait_all(std::chrono::seconds(15));
    const std::string la = a->log(0), lb = b->log(1);
    INFO("--- job A rank 0\n" << la << "--- job B rank 1\n" << lb);
    CHECK(sa == std::vector<int>{3});
    CHECK(sb == std::vector<int>{3});
    CHECK(la.find("ERROR: dtlaunch ddp: " + c.expected) != std::string::npos);
    CHECK(lb.find("ERROR: dtlaunch ddp: " + c.expected) != std::string::npos);
    // At once, not at the 20 s deadline.
    CHECK(error_after_seconds(la) < 5.0);
    CHECK(error_after_seconds(lb) < 5.0);
  }
}

TEST_CASE("rendezvous: a second process with the same rank cannot take the first one's place",
          "[ddp][proc]") {
  dtlaunch_test::TempDir dir("ddp-test");
  const int port = dtlaunch::find_free_port("127.0.0.1");
  const std::map<std::string, std::string> env{{"DDP_TEST_TIMEOUT_MS", "20000"}};
  // World 3 with ranks 0 and 1 in: the rendezvous is still open when the second rank 1 comes.
  auto job = start_job(dir, "job", 3, {0, 1}, port, env);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto second = start_job(dir, "second", 3, {1}, port, env);
  const auto s2 = second->wait_all(std::chrono::seconds(15));
  const auto sj = job->wait_all(std::chrono::seconds(15));
  const std::string l0 = job->log(0), l1 = job->log(1), l2 = second->log(1);
  INFO("--- rank 0\n" << l0 << "--- rank 1\n" << l1 << "--- second rank 1\n" << l2);
  const std::string expected =
      "rank 1 of run '' (world 3) reached the rendezvous at 127.0.0.1:" + std::to_string(port) +
      ", where another process has already checked in as rank 1";
  CHECK(s2 == std::vector<int>{3});
  CHECK(sj == std::vector<int>{3, 3});
  for (const std::string* log : {&l0, &l1, &l2}) {
    CHECK(log->find("ERROR: dtlaunch ddp: " + expected) != std::string::npos);
    CHECK(error_after_seconds(*log) < 5.0);
  }
}

TEST_CASE("rendezvous: a long wait prints which ranks are missing", "[ddp][proc]") {
  const std::map<std::string, std::string> env{{"DDP_TEST_TIMEOUT_MS", "2500"},
                                               {"DDP_TEST_PROGRESS_MS", "500"}};
  auto run = run_ranks(DDP_WORKER, {"rendezvous"}, 3, {0, 2}, env);
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 2);
  const std::string at = "dtlaunch ddp: rendezvous at 127.0.0.1:";
  CHECK(run.ranks[0].output.find(at) != std::string::npos);
  CHECK(run.ranks[0].output.find(": 2 of 3 ranks arrived; waiting for ranks 1 (") !=
        std::string::npos);
  CHECK(run.ranks[1].output.find(": rank 2 checked in; 2 of 3 ranks arrived (") !=
        std::string::npos);
  for (const auto& r : run.ranks)
    CHECK(r.output.find("dtlaunch ddp: dtlaunch ddp:") == std::string::npos);
  auto lone = run_ranks(DDP_WORKER, {"rendezvous"}, 2, {1}, env);
  INFO(describe(lone));
  CHECK(lone.ranks[0].output.find("rank 1 is waiting for the store that rank 0 hosts at "
                                  "127.0.0.1:") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// When a job hangs (docs/ddp.md): typed errors, the cross-rank report, the mismatch check, the
// flight recorder and the startup line. Timeouts of 2 s and a grace of 1 s keep each case short;
// the bounds allow 3 s for process start-up and the rendezvous under load.

namespace {

constexpr double kTimeoutSeconds = 2.0, kGraceSeconds = 1.0, kSlackSeconds = 3.0;

// The collective timeout's own report, without the heartbeat (which would name a killed rank
// first: the heartbeat's tests below).
std::map<std::string, std::string> hang_env(std::map<std::string, std::string> extra = {}) {
  extra["DDP_TEST_TIMEOUT_MS"] = "2000";
  extra["DTLAUNCH_DDP_REPORT_GRACE_MS"] = "1000";
  extra.emplace("DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", "0");
  return extra;
}

// The heartbeat: a 3 s timeout, a collective timeout far beyond it.
constexpr double kHeartbeatSeconds = 3.0;
std::map<std::string, std::string> heartbeat_env(std::map<std::string, std::string> extra = {}) {
  extra["DDP_TEST_TIMEOUT_MS"] = "120000";
  extra["DTLAUNCH_DDP_HEARTBEAT_TIMEOUT"] = "3";
  extra["DTLAUNCH_DDP_SHM"] = "0";
  extra["DDP_TEST_FAULT_DELAY_MS"] = "1500";  // 2.5 heartbeat intervals
  return extra;
}

bool has(const std::string& output, const std::string& what) {
  return output.find(what) != std::string::npos;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("a rank that skips a collective: the others time out naming it and both numbers",
          "[ddp][proc][hang]") {
  const bool shm = GENERATE(true, false);
  INFO((shm ? "shm all_reduce" : "gloo all_reduce"));
  dtlaunch_test::TempDir trace("ddp-trace");
  auto run = run_ranks(DDP_WORKER, {"skip"}, 3, all_ranks(3),
                       hang_env(shm_env(shm, {{"DTLAUNCH_DDP_TRACE_DIR", trace.path()},
                                              {"DTLAUNCH_DDP_TRACE_AT_EXIT", "1"}})));
  INFO(describe(run));
  check_shm_segments(run, shm);
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    if (r.rank == 1) {
      CHECK(r.status == 0);
      CHECK(has(r.output, "skipper done"));
      continue;
    }
    CHECK(r.status == 3);
    CHECK(has(r.output, "error-kind: timeout"));
    CHECK(has(r.output,
              "ERROR: dtlaunch ddp: all_reduce #4 (float32, 4 elements) timed out after "
              "2s on rank " +
                  std::to_string(r.rank) + ": ranks 0,2 wait in #4; rank 1 ("));
    CHECK(has(r.output,
              ", local rank 1) last entered #3 all_reduce (float32, 4 elements), "
              "finished "));
    CHECK(error_after_seconds(r.output) < kTimeoutSeconds + kGraceSeconds + kSlackSeconds);
  }
  // The flight recorder: rank 0's file, written at the error, ends with the failed #4; rank 1's,
  // written at exit, with the completed #3.
  const std::string rank0 = read_file(trace.path() + "/rank-0.json");
  INFO(rank0);
  CHECK(has(rank0, "\"reason\": \"dtlaunch ddp: all_reduce #4 (float32, 4 elements) timed out"));
  CHECK(has(rank0, "{\"seq\": 3, \"op\": \"all_reduce\", \"dtype\": \"float32\", \"numel\": 4, "));
  CHECK(has(rank0, "{\"seq\": 4, \"op\": \"all_reduce\", \"dtype\": \"float32\", \"numel\": 4, "));
  CHECK(rank0.find("\"state\": \"failed\"") > rank0.find("\"seq\": 4"));
  const std::string rank1 = read_file(trace.path() + "/rank-1.json");
  INFO(rank1);
  CHECK(has(rank1, "\"reason\": \"exit\""));
  CHECK(has(rank1, "\"collectives_started\": 3,"));
  CHECK(!has(rank1, "\"seq\": 4"));
}

TEST_CASE("a rank killed mid-job: the survivors throw in bounded time naming it",
          "[ddp][proc][hang]") {
  const bool shm = GENERATE(true, false);
  INFO((shm ? "shm all_reduce" : "gloo all_reduce"));
  auto run = run_ranks(DDP_WORKER, {"kill"}, 3, all_ranks(3),
                       hang_env(shm_env(shm, {{"DDP_TEST_VICTIM", "1"}})));
  INFO(describe(run));
  // Nothing left in /dev/shm although a rank died by SIGKILL.
  check_shm_segments(run, shm);
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    if (r.rank == 1) {
      CHECK(r.status == 128 + SIGKILL);
      continue;
    }
    CHECK(r.status == 3);
    CHECK((has(r.output, "error-kind: peer-lost") || has(r.output, "error-kind: timeout")));
    CHECK(has(r.output, "rank 1 ("));
    CHECK(has(r.output, ", local rank 1) published nothing within 1s"));
    CHECK(error_after_seconds(r.output) < kTimeoutSeconds + kGraceSeconds + kSlackSeconds);
  }
}

TEST_CASE("rank 0 killed mid-job: the others say the store's host is gone", "[ddp][proc][hang]") {
  const bool shm = GENERATE(true, false);
  INFO((shm ? "shm all_reduce" : "gloo all_reduce"));
  auto run = run_ranks(DDP_WORKER, {"kill"}, 3, all_ranks(3),
                       hang_env(shm_env(shm, {{"DDP_TEST_VICTIM", "0"}})));
  INFO(describe(run));
  check_shm_segments(run, shm);
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    if (r.rank == 0) {
      CHECK(r.status == 128 + SIGKILL);
      continue;
    }
    CHECK(r.status == 3);
    CHECK(has(r.output, "the store at 127.0.0.1:"));
    CHECK(has(r.output,
              "is unreachable (connect: Connection refused), so rank 0 (127.0.0.1, the "
              "store's host) is gone"));
    CHECK(error_after_seconds(r.output) < kTimeoutSeconds + kGraceSeconds + kSlackSeconds);
  }
}

TEST_CASE("heartbeat: a rank killed, frozen or rank 0 killed is named within the timeout",
          "[ddp][proc][heartbeat]") {
  struct Case {
    const char* scenario;
    int victim;
    const char* how;
    double within;  // seconds after the fault (the rank's own clock: error-after-seconds)
  };
  // Within: from the worker's call into the runtime (start-up under load included).
  const Case c = GENERATE(Case{"kill", 1, "exited (its connection closed)", 3.0},
                          Case{"kill", 0, "exited (its connection closed)", 3.0},
                          Case{"freeze", 2, "frozen (silent for 3", kHeartbeatSeconds + 3.0});
  INFO(c.scenario << " rank " << c.victim);
  auto run = run_ranks(DDP_WORKER, {c.scenario}, 3, all_ranks(3),
                       heartbeat_env({{"DDP_TEST_VICTIM", std::to_string(c.victim)}}));
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    if (r.rank == c.victim) continue;
    CHECK(r.status == 3);
    CHECK(has(r.output, "error-kind: peer-lost"));
    CHECK(has(r.output, "peer lost (heartbeat, timeout 3s): rank " + std::to_string(c.victim) +
                            " ("));
    CHECK(has(r.output, c.how));
    CHECK(has(r.output, ", last in all_reduce #5"));
    if (c.victim == 0) CHECK(has(r.output, "which hosted the store"));
    CHECK(error_after_seconds(r.output) < c.within + 1.5 + 2.0);  // + the victim's delay
  }
}

TEST_CASE("heartbeat: no false alarm — 60 s without collectives, a slow checkpoint, load 10",
          "[ddp][proc][heartbeat]") {
  dtlaunch_test::TempDir dir("ddp-heartbeat");
  // Load: 10 busy processes on this machine (2 cores in CI) for the whole run.
  std::vector<pid_t> hogs;
  for (int i = 0; i < 10; ++i) {
    const pid_t p = ::fork();
    if (p == 0) {
      std::atomic<uint64_t> n{0};
      for (;;) n.fetch_add(1, std::memory_order_relaxed);
    }
    hogs.push_back(p);
  }
  auto run = run_ranks(DDP_WORKER, {"quiet"}, 3, all_ranks(3),
                       heartbeat_env({{"DDP_TEST_QUIET_SECONDS", "60"},
                                      {"DDP_TEST_CHECKPOINT", dir.path() + "/checkpoint"}}),
                       std::chrono::seconds(150));
  for (const pid_t p : hogs) ::kill(p, SIGKILL);
  for (const pid_t p : hogs) ::waitpid(p, nullptr, 0);
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    CHECK(r.status == 0);
    CHECK(has(r.output, "quiet ok rank " + std::to_string(r.rank)));
    CHECK_FALSE(has(r.output, "peer lost"));
  }
}

TEST_CASE("with DTLAUNCH_DDP_CHECK=1 a different shape or operation is kMismatch on every rank",
          "[ddp][proc][hang]") {
  struct Case {
    const char* scenario;
    const char* rank1_calls;
    const char* differs;
  };
  for (const Case c : {Case{"check-shape", "rank 1 call #3 all_reduce sum float32 [5]", "shape"},
                       Case{"check-op", "rank 1 call #3 all_gather float32 [4]", "operation"}}) {
    DYNAMIC_SECTION(c.scenario) {
      auto run = run_ranks(DDP_WORKER, {c.scenario}, 3, all_ranks(3),
                           hang_env({{"DTLAUNCH_DDP_CHECK", "1"}}));
      INFO(describe(run));
      REQUIRE(run.ranks.size() == 3);
      for (const auto& r : run.ranks) {
        CHECK(r.status == 3);
        CHECK(has(r.output, "error-kind: mismatch"));
        CHECK(has(r.output, "ERROR: dtlaunch ddp: ranks disagree on collective #3 of rank " +
                                std::to_string(r.rank) +
                                " (DTLAUNCH_DDP_CHECK=1): ranks 0,2 call #3 all_reduce sum float32 "
                                "[4]; " +
                                c.rank1_calls + " (differs in " + c.differs + ")"));
        // Before the collectives' timeout: the check does not wait for it.
        CHECK(error_after_seconds(r.output) < kTimeoutSeconds + kSlackSeconds - 1.0);
      }
    }
  }
}

TEST_CASE("a late rank: the job completes and rank 0's startup line names it",
          "[ddp][proc][hang]") {
  auto run = run_ranks(DDP_WORKER, {"late"}, 3, all_ranks(3),
                       {{"DDP_TEST_TIMEOUT_MS", "20000"}, {"DDP_TEST_LATE_RANK", "2"}});
  require_all_ok(run);
  INFO(describe(run));
  CHECK(has(run.ranks[0].output, "dtlaunch ddp: rendezvous: 3 ranks in "));
  CHECK(has(run.ranks[0].output, "; slowest: rank 2 ("));
  CHECK(!has(run.ranks[1].output, "rendezvous: 3 ranks in"));
}

// ---------------------------------------------------------------------------------------------
// The shared-memory all_reduce (docs/ddp.md): the same results as Gloo's, a long stream of async
// all_reduces, a dead peer found by its pid, a mismatch found without DTLAUNCH_DDP_CHECK.

TEST_CASE("shm all_reduce: bit-identical to Gloo's for every size, dtype and op",
          "[ddp][proc][shm]") {
  for (int world : {2, 3}) {
    SECTION("world " + std::to_string(world)) {
      const int port2 = dtlaunch::find_free_port("127.0.0.1");
      auto run = run_ranks(DDP_WORKER, {"shm-vs-gloo"}, world, all_ranks(world),
                           {{"DDP_TEST_PORT2", std::to_string(port2)}});
      require_all_ok(run);
      for (const auto& r : run.ranks) CHECK(has(r.output, ": 24 checks, 0 failed"));
      check_shm_segments(run, true);
    }
  }
}

TEST_CASE("shm all_reduce: 500 back-to-back async all_reduces, Gloo collectives in between",
          "[ddp][proc][shm]") {
  for (int world : {2, 3}) {
    SECTION("world " + std::to_string(world)) {
      auto run = run_ranks(DDP_WORKER, {"shm-stream"}, world, all_ranks(world), {});
      require_all_ok(run);
      for (const auto& r : run.ranks) CHECK(has(r.output, ": 500 all_reduces, 0 wrong"));
      check_shm_segments(run, true);
    }
  }
}

TEST_CASE(
    "shm all_reduce: a SIGKILLed peer is kPeerLost naming its rank and pid, long before "
    "the timeout",
    "[ddp][proc][shm][hang]") {
  // The segment's own detection, without the heartbeat (which names the rank first otherwise).
  auto run = run_ranks(DDP_WORKER, {"kill"}, 3, all_ranks(3),
                       {{"DDP_TEST_TIMEOUT_MS", "30000"},
                        {"DTLAUNCH_DDP_REPORT_GRACE_MS", "1000"},
                        {"DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", "0"},
                        {"DDP_TEST_VICTIM", "2"}});
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    if (r.rank == 2) {
      CHECK(r.status == 128 + SIGKILL);
      continue;
    }
    CHECK(r.status == 3);
    CHECK(has(r.output, "error-kind: peer-lost"));
    CHECK(has(r.output,
              "ERROR: dtlaunch ddp: all_reduce #6 (float32, 4 elements) lost a peer on "
              "rank " +
                  std::to_string(r.rank) + " (rank 2 (pid "));
    CHECK(has(r.output, ") is gone): "));
    CHECK(has(r.output, ", local rank 2) published nothing within 1s"));
    // Detection within about 0.1 s, then the report's 1 s grace; the timeout is 30 s.
    CHECK(error_after_seconds(r.output) < 1.0 + kGraceSeconds + kSlackSeconds);
  }
  check_shm_segments(run, true);
}

TEST_CASE("shm all_reduce: different sizes on different ranks are kMismatch on every rank",
          "[ddp][proc][shm][hang]") {
  auto run = run_ranks(DDP_WORKER, {"shm-mismatch"}, 3, all_ranks(3), hang_env());
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    CHECK(r.status == 3);
    CHECK(has(r.output, "error-kind: mismatch"));
    if (r.rank == 1)
      CHECK(has(r.output,
                "ERROR: dtlaunch ddp: shm all_reduce on rank 1 of 3 failed: rank 0 "
                "all-reduces 4 float32 elements (sum) where rank 1 all-reduces 5 "
                "float32 elements (sum)"));
    else
      CHECK(has(r.output, "ERROR: dtlaunch ddp: shm all_reduce on rank " + std::to_string(r.rank) +
                              " of 3 failed: rank 1 all-reduces 5 float32 elements (sum) where "
                              "rank " +
                              std::to_string(r.rank) + " all-reduces 4 float32 elements (sum)"));
    CHECK(error_after_seconds(r.output) < kTimeoutSeconds);
  }
}

TEST_CASE("shm all_reduce: a malformed DTLAUNCH_DDP_SHM fails before the rendezvous",
          "[ddp][proc][shm]") {
  auto run = run_ranks(DDP_WORKER, {"rendezvous"}, 2, {1},
                       {{"DTLAUNCH_DDP_SHM", "yes"}, {"DDP_TEST_TIMEOUT_MS", "20000"}});
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 1);
  CHECK(run.ranks[0].status == 3);
  CHECK(has(run.ranks[0].output, "ERROR: dtlaunch ddp: DTLAUNCH_DDP_SHM='yes' must be 0 or 1"));
  CHECK(error_after_seconds(run.ranks[0].output) < 2.0);
}

TEST_CASE(
    "shm all_reduce: a segment that cannot be created or opened falls back to Gloo with "
    "one line",
    "[ddp][proc][shm]") {
  struct Case {
    int small_rank;
    std::string reason;  // in rank 0's line
  };
  for (const Case& c : {Case{0, "rank 0: reserving 4 MiB in /dev/shm for /dtlaunch-ddp-"},
                        Case{1, "rank 1: shm_open /dtlaunch-ddp-"}}) {
    DYNAMIC_SECTION("rank " << c.small_rank << " with a 1 MiB /dev/shm of its own") {
      auto run = run_ranks(DDP_WORKER, {"collectives"}, 2, all_ranks(2),
                           {{"DDP_TEST_SMALL_SHM_RANK", std::to_string(c.small_rank)}});
      INFO(describe(run));
      REQUIRE(run.ranks.size() == 2);
      if (has(run.ranks[static_cast<size_t>(c.small_rank)].output, "small-shm: not permitted")) {
        WARN("no private mount namespace here (needs CAP_SYS_ADMIN): fallback not exercised");
        return;
      }
      CHECK(has(run.ranks[static_cast<size_t>(c.small_rank)].output, "small-shm: mounted"));
      require_all_ok(run);
      check_shm_segments(run, false);
      const std::string line = "dtlaunch ddp: shared-memory all_reduce unavailable (" + c.reason;
      const std::string& out0 = run.ranks[0].output;
      CHECK(has(out0, line));
      CHECK(out0.find("all_reduce unavailable") == out0.rfind("all_reduce unavailable"));
      CHECK(has(out0, "); all_reduce goes through Gloo"));
      CHECK(!has(run.ranks[1].output, "shared-memory all_reduce unavailable"));
      for (const auto& r : run.ranks) CHECK(has(r.output, "checks, 0 failed"));
    }
  }
}
