// The DDP runtime as real processes on Gloo: 2 and 4 ranks of ddp_worker (DDP_WORKER).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "dtlaunch_catch.hpp"
#include "proc/supervisor.hpp"
#include "ranks.hpp"
#include "test_support.hpp"
#include "trace/trace_dir.hpp"

using ddp_test::all_ranks;
using ddp_test::run_ranks;

namespace {

bool has(const std::string& output, const std::string& what) {
  return output.find(what) != std::string::npos;
}

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
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A fake peer on MASTER_PORT for fuzzing the client side of the rendezvous: to every connection
// it sends `bytes`, either at once (kSpeakFirst, as the listener of 0xff bytes did), or in
// reply to each request it reads (kReply), and then keeps the connection open or closes it.
// kSpeakLate sends them unasked `late` after it accepted, past any grace a client gives a quiet
// peer, and until then answers each request with one byte 1: a store's "not ready" to a check.
class GarbageListener {
 public:
  enum Mode { kSpeakFirst, kReply, kSpeakAndClose, kSpeakLate };
  GarbageListener(std::string bytes, Mode mode,
                  std::chrono::milliseconds late = std::chrono::milliseconds(0))
      : bytes_(std::move(bytes)), mode_(mode), late_(late) {
    thread_ = std::thread([this] { serve(); });
  }
  ~GarbageListener() {
    stop_ = true;
    thread_.join();
    for (const Client& c : clients_) ::close(c.fd);
  }
  GarbageListener(const GarbageListener&) = delete;
  GarbageListener& operator=(const GarbageListener&) = delete;
  int port() const { return listener_.port(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Client {
    int fd;
    Clock::time_point accepted;
    bool spoke;
  };
  static void send_text(int c, const std::string& b) {
    (void)::send(c, b.data(), b.size(), MSG_NOSIGNAL);
  }
  void accept_one() {
    const int c = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    if (mode_ == kSpeakFirst || mode_ == kSpeakAndClose) send_text(c, bytes_);
    if (mode_ == kSpeakAndClose)
      ::close(c);
    else
      clients_.push_back({c, Clock::now(), false});
  }
  void serve() {
    while (!stop_) {
      for (Client& c : clients_)
        if (mode_ == kSpeakLate && !c.spoke && Clock::now() - c.accepted >= late_) {
          send_text(c.fd, bytes_);
          c.spoke = true;
        }
      std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
      for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 5) <= 0) continue;
      if (fds[0].revents & POLLIN) accept_one();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        char buf[4096];
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0 && mode_ == kReply) send_text(fds[i].fd, bytes_);
        if (n > 0 && mode_ == kSpeakLate) send_text(fds[i].fd, std::string(1, '\x01'));
        if (n == 0) {
          ::close(fds[i].fd);
          clients_.erase(std::find_if(clients_.begin(), clients_.end(),
                                      [&](const Client& c) { return c.fd == fds[i].fd; }));
        }
      }
    }
  }

  SilentListener listener_;
  std::string bytes_;
  Mode mode_;
  std::chrono::milliseconds late_;
  std::vector<Client> clients_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// 1-64 random bytes.
std::string random_bytes(std::mt19937& rng) {
  std::string b(1 + rng() % 64, '\0');
  for (char& c : b) c = static_cast<char>(rng());
  return b;
}

// Rank 1 alone, with a 2 s timeout, against a fake peer on MASTER_PORT.
ddp_test::RankRun rank_1_against(const GarbageListener& peer) {
  return run_ranks(DDP_WORKER, {"rendezvous"}, 2, {1},
                   {{"MASTER_PORT", std::to_string(peer.port())}, {"DDP_TEST_TIMEOUT_MS", "2000"}},
                   std::chrono::seconds(20));
}

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
                                 "small-first-bucket", "no_sync-accumulation", "separate-gradients",
                                 "gradients-set-to-none", "control-no-communication"})
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
    CHECK(r.output.find("unused-kept rank") != std::string::npos);
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
      {2, {0}, "timed out after 2 s: 1 of 2 ranks arrived; missing ranks: 1"},
      {4, {0, 2}, "timed out after 2 s: 2 of 4 ranks arrived; missing ranks: 1,3"},
      {4, {0}, "timed out after 2 s: 1 of 4 ranks arrived; missing ranks: 1-3"},
      {2, {1}, "could not reach the store that rank 0 hosts within 2 s"},
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
                                 "within 2 s (is MASTER_PORT another program's port") !=
        std::string::npos);
}

// Issue 26 item 1: whatever bytes the port sends, the client side of the rendezvous ends in a
// typed error within its timeout (exit 3 from the worker), never in an abort (134) from a
// length read out of garbage. A table of hand-picked sequences, then seeded random ones.
TEST_CASE("rendezvous: any bytes from the port give a typed error in time, never an abort",
          "[ddp][proc]") {
  struct Case {
    std::string name;
    std::string bytes;
    GarbageListener::Mode mode;
  };
  std::vector<Case> cases = {
      {"64 bytes of 0xff to every connection", std::string(64, '\xff'),
       GarbageListener::kSpeakFirst},
      {"a callback-registered byte", std::string(1, '\x03'), GarbageListener::kSpeakFirst},
      {"eight zero bytes", std::string(8, '\0'), GarbageListener::kSpeakFirst},
      {"0xff bytes, then close", std::string(64, '\xff'), GarbageListener::kSpeakAndClose},
      {"0xff bytes as every reply", std::string(64, '\xff'), GarbageListener::kReply},
      {"'ready', then a huge length", std::string(1, '\0') + std::string(8, '\x7f'),
       GarbageListener::kReply},
      {"an HTTP answer", "HTTP/1.1 400 Bad Request\r\n\r\n", GarbageListener::kReply},
  };
  std::mt19937 rng(26);
  for (int i = 0; i < 6; ++i) {
    cases.push_back({"random " + std::to_string(i), random_bytes(rng),
                     i % 2 ? GarbageListener::kReply : GarbageListener::kSpeakFirst});
  }
  for (const Case& c : cases) {
    INFO(c.name);
    GarbageListener peer(c.bytes, c.mode);
    const auto run = rank_1_against(peer);
    INFO(describe(run));
    REQUIRE(run.ranks.size() == 1);
    const std::string& out = run.ranks[0].output;
    CHECK(run.ranks[0].status == 3);
    CHECK(has(out, "ERROR: dtlaunch ddp: "));
    // What spoke first or answered is named as not the store's protocol; a reply that is a
    // prefix of a valid one and then silence is a timeout, as a stopped rank 0 would be.
    // (LibTorch 2.x keeps c10d's client, which retries a connection closed on it until its
    // timeout: there any typed error in time will do.)
    if (DDP_TEST_OWN_STORE_CLIENT &&
        (c.mode == GarbageListener::kSpeakFirst || c.mode == GarbageListener::kSpeakAndClose))
      CHECK((has(out, "error-kind: config") || has(out, "error-kind: backend")));
    else
      CHECK((has(out, "error-kind: config") || has(out, "error-kind: backend") ||
             has(out, "error-kind: timeout")));
    CHECK(error_after_seconds(out) < 3.5);
  }
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

// Issue 26 item 2: the intruder fails at once naming both runs; the job it reached logs one line
// and goes on waiting for its own rank, which then completes it.
TEST_CASE("rendezvous: a rank of another job is refused, the job it reached completes",
          "[ddp][proc]") {
  dtlaunch_test::TempDir dir("ddp-test");
  // One port per case: each case's store must be new.
  std::vector<int> ports;
  for (int i = 0; i < 3; ++i) ports.push_back(dtlaunch::launch::find_free_port("127.0.0.1"));
  struct Case {
    std::string name;
    std::map<std::string, std::string> a_env, b_env;
    std::string expected;
  };
  auto at = [&](size_t i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  const std::vector<Case> cases = {
      {"run ids differ",
       {{"DTLAUNCH_RUN_ID", "slurm-100.0"}},
       {{"DTLAUNCH_RUN_ID", "slurm-200.0"}},
       "rank 1 of run 'slurm-200.0' (world 2) reached the rendezvous at " + at(0) +
           " of run 'slurm-100.0' (world 2): two jobs share MASTER_ADDR:MASTER_PORT"},
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
    const auto sb = b->wait_all(std::chrono::seconds(15));
    const std::string lb = b->log(1);
    INFO("--- job B rank 1\n" << lb);
    CHECK(sb == std::vector<int>{3});
    CHECK(lb.find("ERROR: dtlaunch ddp: " + c.expected) != std::string::npos);
    CHECK(error_after_seconds(lb) < 5.0);
    // Job A's own rank 1 comes after the intruder has gone: A completes.
    auto a1 = start_job(dir, "a1", 2, {1}, port, env_a);
    const auto sa = a->wait_all(std::chrono::seconds(20));
    const auto sa1 = a1->wait_all(std::chrono::seconds(20));
    const std::string la = a->log(0);
    INFO("--- job A rank 0\n" << la << "--- job A rank 1\n" << a1->log(1));
    CHECK(sa == std::vector<int>{0});
    CHECK(sa1 == std::vector<int>{0});
    const std::string refused =
        "dtlaunch ddp: rank 0 refused a rank of another job: dtlaunch ddp: " + c.expected;
    CHECK(la.find(refused) != std::string::npos);
    // One line for the one intruder.
    CHECK(la.find("refused a rank of another job") == la.rfind("refused a rank of another job"));
    CHECK(la.find("ERROR") == std::string::npos);
  }
}

TEST_CASE("rendezvous: a second process with the same rank cannot take the first one's place",
          "[ddp][proc]") {
  dtlaunch_test::TempDir dir("ddp-test");
  const int port = dtlaunch::launch::find_free_port("127.0.0.1");
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

// Load: `n` busy processes, each spinning on a core, until stop() or the end of the scope.
class BusyProcesses {
 public:
  explicit BusyProcesses(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t p = ::fork();
      if (p == 0) {
        std::atomic<uint64_t> count{0};
        for (;;) count.fetch_add(1, std::memory_order_relaxed);
      }
      if (p > 0) pids_.push_back(p);
    }
  }
  ~BusyProcesses() { stop(); }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;
  void stop() {
    for (const pid_t p : pids_) ::kill(p, SIGKILL);
    for (const pid_t p : pids_) ::waitpid(p, nullptr, 0);
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `dtlaunch trace DIR`'s text verdict, which must end with `status`.
std::string trace_verdict(const std::string& dir, int status) {
  std::ostringstream out, err;
  const int got =
      dtlaunch::trace::run_trace({dir, dtlaunch::trace::TraceFormat::kText, "", "", ""}, out, err);
  INFO(out.str() + err.str());
  CHECK(got == status);
  return out.str() + err.str();
}

}  // namespace

TEST_CASE("a rank that skips a collective: the others time out naming it and both numbers",
          "[ddp][proc][hang]") {
  const bool shm = GENERATE(true, false);
  INFO((shm ? "shm all_reduce" : "gloo all_reduce"));
  dtlaunch_test::TempDir trace("ddp-trace");
  auto run = run_ranks(DDP_WORKER, {"skip"}, 3, all_ranks(3),
                       hang_env(shm_env(shm, {{"DTLAUNCH_DDP_TRACE_DIR", trace.path()},
                                              {"DTLAUNCH_DDP_TRACE_AT_EXIT", "1"},
                                              {"DTLAUNCH_RUN_ID", "skiptest"}})));
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
    // Both waiting ranks time out at about the same moment. On a loaded machine the other one
    // may have failed already, or not answered within the report's grace: it is then named as
    // such, after the skipper, instead of as waiting in #4. What must hold: this rank waits in
    // #4 and rank 1, the skipper, is named with the collective it last entered.
    const std::string head =
        "ERROR: dtlaunch ddp: all_reduce #4 (float32, 4 elements) timed out "
        "after 2 s on rank " +
        std::to_string(r.rank) + ": ";
    CHECK((has(r.output, head + "ranks 0,2 wait in #4; rank 1 (") ||
           has(r.output, head + "rank " + std::to_string(r.rank) + " waits in #4; rank 1 (")));
    CHECK(has(r.output,
              ", local rank 1) last entered #3 all_reduce (float32, 4 elements), "
              "finished "));
    CHECK(error_after_seconds(r.output) < kTimeoutSeconds + kGraceSeconds + kSlackSeconds);
  }
  // The flight recorder: rank 0's file, written at the error, ends with the failed #4; rank 1's,
  // written at exit, with the completed #3. The names carry the run id and the attempt.
  const std::string rank0 = read_file(trace.path() + "/skiptest.a0.rank-0.error.json");
  INFO(rank0);
  CHECK(has(rank0, "\"reason\": \"dtlaunch ddp: all_reduce #4 (float32, 4 elements) timed out"));
  CHECK(has(rank0,
            "{\"seq\": 3, \"op\": \"all_reduce\", \"dtype\": \"float32\", \"numel\": 4, "
            "\"shape\": [4], "));
  CHECK(has(rank0, "{\"seq\": 4, \"op\": \"all_reduce\", \"dtype\": \"float32\", \"numel\": 4, "));
  CHECK(has(rank0.substr(rank0.find("{\"seq\": 4")), "\"state\": \"failed\"}"));
  const std::string rank1 = read_file(trace.path() + "/skiptest.a0.rank-1.json");
  INFO(rank1);
  CHECK(has(rank1, "\"reason\": \"exit\""));
  CHECK(has(rank1, "\"collectives_started\": 3,"));
  CHECK(!has(rank1, "\"seq\": 4"));
  // Rank 0's exit did not replace its error's file.
  CHECK(!std::filesystem::exists(trace.path() + "/skiptest.a0.rank-0.json"));
  // dtlaunch trace: the collective, the rank that never entered it, the ranks that waited.
  const std::string verdict = trace_verdict(trace.path(), dtlaunch::trace::kTraceProblem);
  CHECK(has(verdict, "dtlaunch trace: " + trace.path() +
                         ": run skiptest attempt 0, 3 of 3 ranks, 4 collectives\n"));
  CHECK(has(verdict, "first divergence: all_reduce #4 (float32, [4]): rank 1 ("));
  CHECK(has(verdict,
            ", local rank 1) never entered it (last entered all_reduce #3 (float32, [4]), "
            "completed); ranks 0,2 waited in it until it failed\n"));
}

TEST_CASE("a rank killed mid-job: the survivors throw in bounded time naming it",
          "[ddp][proc][hang]") {
  const bool shm = GENERATE(true, false);
  INFO((shm ? "shm all_reduce" : "gloo all_reduce"));
  dtlaunch_test::TempDir trace("ddp-trace");
  auto run = run_ranks(
      DDP_WORKER, {"kill"}, 3, all_ranks(3),
      hang_env(shm_env(shm, {{"DDP_TEST_VICTIM", "1"}, {"DTLAUNCH_DDP_TRACE_DIR", trace.path()}})));
  INFO(describe(run));
  // The killed rank wrote nothing: dtlaunch trace names it missing.
  const std::string verdict = trace_verdict(trace.path(), dtlaunch::trace::kTraceProblem);
  CHECK(has(verdict, ", 2 of 3 ranks, 6 collectives\n"));
  CHECK(has(verdict, "missing: rank 1 (no readable file"));
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
    CHECK(has(r.output, ", local rank 1) published nothing within 1 s"));
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
    CHECK(has(r.output,
              "peer lost (heartbeat, timeout 3 s): rank " + std::to_string(c.victim) + " ("));
    CHECK(has(r.output, c.how));
    CHECK(has(r.output, ", last in all_reduce #5"));
    if (c.victim == 0) CHECK(has(r.output, "which hosted the store"));
    CHECK(error_after_seconds(r.output) < c.within + 1.5 + 2.0);  // + the victim's delay
  }
}

TEST_CASE("heartbeat: a rank frozen in a shared-memory all_reduce is named within the timeout",
          "[ddp][proc][heartbeat]") {
  // 2 ranks on this node: all_reduce goes through shm, whose waits see no socket close. The
  // victim stays frozen for 20 s, far past the heartbeat timeout: the survivor must not wait
  // for it to die (nor for the 120 s collective timeout).
  auto env = heartbeat_env({{"DDP_TEST_VICTIM", "1"}, {"DDP_TEST_FREEZE_SECONDS", "20"}});
  env["DTLAUNCH_DDP_SHM"] = "1";
  auto run = run_ranks(DDP_WORKER, {"freeze"}, 2, all_ranks(2), env);
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 2);
  const auto& r = run.ranks[0].rank == 0 ? run.ranks[0] : run.ranks[1];
  REQUIRE(has(r.output, "shm-segment: /dev/shm/"));  // the all_reduces went through shm
  CHECK(r.status == 3);
  CHECK(has(r.output, "error-kind: peer-lost"));
  CHECK(has(r.output, "peer lost (heartbeat, timeout 3 s): rank 1 ("));
  CHECK(has(r.output, "frozen (silent for 3"));
  CHECK(has(r.output, ", last in all_reduce #5"));
  // + the victim's delay before its fault (1.5 s) + 2 s of slack for a loaded machine.
  CHECK(error_after_seconds(r.output) < kHeartbeatSeconds + 3.0 + 1.5 + 2.0);
}

TEST_CASE("heartbeat: no false alarm — 60 s without collectives, a slow checkpoint, load 10",
          "[ddp][proc][heartbeat]") {
  dtlaunch_test::TempDir dir("ddp-heartbeat");
  BusyProcesses load(10);  // on this machine (2 cores in CI), for the whole run
  auto run = run_ranks(DDP_WORKER, {"quiet"}, 3, all_ranks(3),
                       heartbeat_env({{"DDP_TEST_QUIET_SECONDS", "60"},
                                      {"DDP_TEST_CHECKPOINT", dir.path() + "/checkpoint"}}),
                       std::chrono::seconds(150));
  load.stop();
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
    const char* trace_rank1;
  };
  for (const Case c : {Case{"check-shape", "rank 1 call #3 all_reduce sum float32 [5]", "shape",
                            "all_reduce (float32, [5])"},
                       Case{"check-op", "rank 1 call #3 all_gather float32 [4]", "operation",
                            "all_gather (float32, [4])"}}) {
    DYNAMIC_SECTION(c.scenario) {
      dtlaunch_test::TempDir trace("ddp-trace");
      auto run = run_ranks(
          DDP_WORKER, {c.scenario}, 3, all_ranks(3),
          hang_env({{"DTLAUNCH_DDP_CHECK", "1"}, {"DTLAUNCH_DDP_TRACE_DIR", trace.path()}}));
      INFO(describe(run));
      const std::string verdict = trace_verdict(trace.path(), dtlaunch::trace::kTraceProblem);
      CHECK(
          has(verdict, std::string("mismatches: 1 collective where ranks disagree (1 rank entries "
                                   "off the majority); first #3: ranks 0,2 all_reduce (float32, "
                                   "[4]); rank 1 ") +
                           c.trace_rank1 + " (differs in " + c.differs + ")\n"));
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

// Issue 26 item 17: DTLAUNCH_DDP_CHECK on some ranks only used to deadlock the first collective
// until the timeout, with no word of the check; now init fails every rank at once, naming it.
TEST_CASE("DTLAUNCH_DDP_CHECK=1 on one rank only: one kConfig line on every rank, at init",
          "[ddp][proc]") {
  dtlaunch_test::TempDir dir("ddp-test");
  const int port = dtlaunch::launch::find_free_port("127.0.0.1");
  auto on0 = start_job(dir, "r0", 3, {0}, port, {{"DDP_TEST_TIMEOUT_MS", "20000"}});
  auto on12 = start_job(dir, "r12", 3, {1, 2}, port,
                        {{"DDP_TEST_TIMEOUT_MS", "20000"}, {"DTLAUNCH_DDP_CHECK", "1"}});
  const auto s0 = on0->wait_all(std::chrono::seconds(30));
  const auto s12 = on12->wait_all(std::chrono::seconds(30));
  const std::vector<std::string> logs = {on0->log(0), on12->log(1), on12->log(2)};
  INFO("--- rank 0\n" << logs[0] << "--- rank 1\n" << logs[1] << "--- rank 2\n" << logs[2]);
  CHECK(s0 == std::vector<int>{3});
  CHECK(s12 == std::vector<int>{3, 3});
  for (const std::string& log : logs) {
    CHECK(has(log,
              "ERROR: dtlaunch ddp: the ranks' settings differ: rank 0 has "
              "'DTLAUNCH_DDP_CHECK=0', ranks 1-2 'DTLAUNCH_DDP_CHECK=1'; set these "
              "variables the same on every rank"));
    CHECK(has(log, "error-kind: config"));
    CHECK(error_after_seconds(log) < 10.0);
  }
}

TEST_CASE("a straggler (20 ms before each step) is named, without the sleep nobody is",
          "[ddp][proc][hang][trace]") {
  // One run with the straggler, three without: a detector that names someone in a healthy run
  // on this loaded machine is worse than none.
  for (int straggler : {2, -1, -1, -1}) {
    INFO("straggler " << straggler);
    dtlaunch_test::TempDir trace("ddp-trace");
    std::map<std::string, std::string> env = {{"DDP_TEST_TIMEOUT_MS", "20000"},
                                              {"DTLAUNCH_DDP_TRACE_DIR", trace.path()},
                                              {"DTLAUNCH_DDP_TRACE_AT_EXIT", "1"}};
    if (straggler >= 0) env["DDP_TEST_STRAGGLER"] = std::to_string(straggler);
    auto run = run_ranks(DDP_WORKER, {"straggle"}, 4, all_ranks(4), env);
    require_all_ok(run);
    const std::string verdict = trace_verdict(trace.path(), straggler >= 0 ? 3 : 0);
    if (straggler >= 0) {
      CHECK(has(verdict, "straggler: rank 2 ("));
      CHECK(verdict.find("straggler: rank ", verdict.find("straggler: rank 2") + 1) ==
            std::string::npos);
    } else {
      CHECK(has(verdict, "stragglers: none (181 collectives every rank entered)"));
    }
    CHECK(has(verdict, "no divergence: every rank completed every collective its file holds"));
  }
}

TEST_CASE("SIGUSR2 dumps every rank's flight recorder while training goes on",
          "[ddp][proc][hang][trace]") {
  dtlaunch_test::TempDir trace("ddp-trace");
  auto run = run_ranks(DDP_WORKER, {"dump"}, 3, all_ranks(3),
                       {{"DDP_TEST_TIMEOUT_MS", "20000"},
                        {"DTLAUNCH_DDP_TRACE_DIR", trace.path()},
                        {"DTLAUNCH_RUN_ID", "dumptest"}});
  require_all_ok(run);
  INFO(describe(run));
  for (const auto& r : run.ranks) {
    CHECK(has(r.output, "dump file: dumptest.a0.rank-" + std::to_string(r.rank) + ".json"));
    CHECK(has(r.output, "dtlaunch ddp: rank " + std::to_string(r.rank) + " (SIGUSR2): "));
    CHECK(has(r.output, "; flight recorder in " + trace.path() + "/dumptest.a0.rank-"));
  }
  const std::string dumped = read_file(trace.path() + "/dumptest.a0.rank-1.json");
  CHECK(has(dumped, "\"kind\": \"signal\", \"reason\": \"SIGUSR2\""));
  CHECK(has(dumped, "{\"seq\": 29, \"op\": \"all_reduce\""));
  // Rank 0 measured the others' clocks by then.
  CHECK(!has(dumped, "\"clock_offset_us\": null"));
  // A snapshot of a running job: the ranks are about the same place, which is not a problem.
  const std::string verdict = trace_verdict(trace.path(), 0);
  CHECK(has(verdict, "run dumptest attempt 0, 3 of 3 ranks, "));

  // A program with a SIGUSR2 handler of its own keeps it, and nothing is dumped.
  dtlaunch_test::TempDir own("ddp-trace");
  auto kept = run_ranks(DDP_WORKER, {"dump"}, 2, all_ranks(2),
                        {{"DDP_TEST_TIMEOUT_MS", "20000"},
                         {"DTLAUNCH_DDP_TRACE_DIR", own.path()},
                         {"DDP_TEST_OWN_USR2", "1"}});
  require_all_ok(kept);
  for (const auto& r : kept.ranks) CHECK(has(r.output, "own SIGUSR2 handler ran"));
  CHECK(std::filesystem::is_empty(own.path()));
}

TEST_CASE("a late rank: the job completes and rank 0's startup line names it",
          "[ddp][proc][hang]") {
  // Rank 0 prints the line only when it waited more than 1 s at check-in. Rank 2's lateness
  // counts from its own start, so 4 s, not the worker's 1.5 s: on a loaded machine rank 0 can
  // reach check-in a second or more after rank 2 has started (a CI run missed the line so).
  auto run = run_ranks(DDP_WORKER, {"late"}, 3, all_ranks(3),
                       {{"DDP_TEST_TIMEOUT_MS", "20000"},
                        {"DDP_TEST_LATE_RANK", "2"},
                        {"DDP_TEST_LATE_MS", "4000"}});
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
      const int port2 = dtlaunch::launch::find_free_port("127.0.0.1");
      auto run = run_ranks(DDP_WORKER, {"shm-vs-gloo"}, world, all_ranks(world),
                           {{"DDP_TEST_PORT2", std::to_string(port2)}});
      require_all_ok(run);
      for (const auto& r : run.ranks) CHECK(has(r.output, ": 32 checks, 0 failed"));
      check_shm_segments(run, true);
    }
  }
}

// Field 22 of /proc/PID/stat (the process's start time in ticks), as the segment names carry it.
std::string start_ticks_of(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

// Issue 26 item 20: a rank 0 SIGKILLed between creating its segment and unlinking it leaves the
// segment behind; it is named after that rank 0's pid and start time, and the next run's rank 0
// on the node removes it once that process is gone. A live process's segment stays, and so does
// another user's.
TEST_CASE("shm all_reduce: a segment left by a dead rank 0 is removed by the next run",
          "[ddp][proc][shm]") {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(dead > 0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale =
      "/dev/shm/dtlaunch-ddp-" + std::to_string(dead) + "-12345-00000000deadbeef";
  const std::string live = "/dev/shm/dtlaunch-ddp-" + std::to_string(::getpid()) + "-" +
                           start_ticks_of(::getpid()) + "-00000000feedf00d";
  // Another user's, of a dead process too: not this user's to remove (root could).
  const std::string foreign =
      "/dev/shm/dtlaunch-ddp-" + std::to_string(dead) + "-12345-00000000f0e1d2c3";
  std::ofstream(stale) << "stale";
  std::ofstream(live) << "live";
  std::ofstream(foreign) << "another user's";
  const bool other_owner = ::chown(foreign.c_str(), ::geteuid() + 1, ::getegid()) == 0;
  REQUIRE(std::filesystem::exists(stale));
  auto run = run_ranks(DDP_WORKER, {"collectives"}, 2, all_ranks(2), {});
  require_all_ok(run);
  check_shm_segments(run, true);
  CHECK(!std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  if (other_owner) CHECK(std::filesystem::exists(foreign));
  std::filesystem::remove(live);
  std::filesystem::remove(stale);
  std::filesystem::remove(foreign);
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
    CHECK(has(r.output, ", local rank 2) published nothing within 1 s"));
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

// ---------------------------------------------------------------------------------------------
// The hierarchical all_reduce across nodes (docs/ddp.md, "Across nodes"): ranks that declare
// themselves on several nodes of this machine (DDP_TEST_NODES sets each one's NODE_RANK), each
// node with a segment of its own, and Gloo among the nodes.

std::string node_list(const std::vector<int>& node_of) {
  std::string list;
  for (int n : node_of) list += (list.empty() ? "" : ",") + std::to_string(n);
  return list;
}

std::map<std::string, std::string> hier_env(const std::vector<int>& node_of,
                                            std::map<std::string, std::string> env = {}) {
  env["DDP_TEST_NODES"] = node_list(node_of);
  env["DTLAUNCH_DDP_HIER"] = "1";
  return env;
}

// The hierarchical path ran: the ranks of a node share one segment, each node has its own.
void check_node_segments(const ddp_test::RankRun& run, const std::vector<int>& node_of) {
  INFO(describe(run));
  std::map<int, std::set<std::string>> by_node;
  for (const auto& r : run.ranks)
    by_node[node_of.at(static_cast<size_t>(r.rank))].insert(shm_segment(r.output));
  std::set<std::string> all;
  for (const auto& [node, names] : by_node) {
    INFO("node " << node);
    CHECK(names.size() == 1);
    CHECK(names.begin()->rfind("/dev/shm/dtlaunch-ddp-", 0) == 0);
    all.insert(names.begin(), names.end());
  }
  CHECK(all.size() == by_node.size());
}

TEST_CASE("hierarchical all_reduce: bit-identical to Gloo's on even, uneven and interleaved nodes",
          "[ddp][proc][shm][hier]") {
  // 2+2; 3+2 (a node's third rank owns no slice); 2+3 with the ranks interleaved across nodes.
  for (const std::vector<int>& node_of :
       {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 0, 1, 1},
        std::vector<int>{0, 1, 0, 1, 1}}) {
    DYNAMIC_SECTION("nodes " << node_list(node_of)) {
      const int world = static_cast<int>(node_of.size());
      const int port2 = dtlaunch::launch::find_free_port("127.0.0.1");
      auto run = run_ranks(DDP_WORKER, {"shm-vs-gloo"}, world, all_ranks(world),
                           hier_env(node_of, {{"DDP_TEST_PORT2", std::to_string(port2)}}));
      require_all_ok(run);
      for (const auto& r : run.ranks) CHECK(has(r.output, ": 32 checks, 0 failed"));
      check_node_segments(run, node_of);
    }
  }
}

// 3 + 1: one slice, which the lone rank of node 1 owns (the batch of 16 needs a world of 2 or 4).
TEST_CASE(
    "hierarchical all_reduce: DDP's buckets on 3 + 1 nodes follow one process on the whole "
    "batch",
    "[ddp][proc][shm][hier]") {
  const std::vector<int> node_of{0, 0, 0, 1};
  auto run = run_ranks(DDP_WORKER, {"train"}, 4, all_ranks(4), hier_env(node_of));
  require_all_ok(run);
  check_node_segments(run, node_of);
  for (const auto& r : run.ranks)
    for (const char* name : {"one-bucket", "several-buckets", "bucket-per-gradient",
                             "no_sync-accumulation", "control-no-communication"})
      CHECK(has(r.output, name));
}

TEST_CASE(
    "hierarchical all_reduce: off on one rank, one rank per node, shm off on one rank or no "
    "room on one node: every rank goes through Gloo",
    "[ddp][proc][shm][hier]") {
  struct Case {
    const char* what;
    std::vector<int> node_of;
    std::map<std::string, std::string> env;
  };
  const std::vector<int> uneven{0, 0, 0, 1, 1};
  for (const Case& c :
       {Case{"DTLAUNCH_DDP_HIER=0 on rank 2",
             {0, 0, 1, 1},
             {{"DDP_TEST_NODES", "0,0,1,1"}, {"DDP_TEST_RANK_ENV", "2:DTLAUNCH_DDP_HIER=0"}}},
        Case{"one rank per node", {0, 1, 2}, hier_env({0, 1, 2})},
        Case{"DTLAUNCH_DDP_SHM=0 on rank 4", uneven,
             hier_env(uneven, {{"DDP_TEST_RANK_ENV", "4:DTLAUNCH_DDP_SHM=0"}})},
        Case{"a 1 MiB /dev/shm on rank 3, node 1's first", uneven,
             hier_env(uneven, {{"DDP_TEST_SMALL_SHM_RANK", "3"}})}}) {
    DYNAMIC_SECTION(c.what) {
      const int world = static_cast<int>(c.node_of.size());
      auto env = c.env;
      env["DDP_TEST_PORT2"] = std::to_string(dtlaunch::launch::find_free_port("127.0.0.1"));
      auto run = run_ranks(DDP_WORKER, {"shm-vs-gloo"}, world, all_ranks(world), env);
      INFO(describe(run));
      if (env.count("DDP_TEST_SMALL_SHM_RANK") &&
          has(run.ranks.at(3).output, "small-shm: not permitted")) {
        WARN("no private mount namespace here (needs CAP_SYS_ADMIN): fallback not exercised");
        continue;
      }
      require_all_ok(run);
      for (const auto& r : run.ranks) CHECK(has(r.output, ": 32 checks, 0 failed"));
      check_shm_segments(run, false);
      if (env.count("DDP_TEST_SMALL_SHM_RANK"))
        CHECK(has(run.ranks.at(3).output,
                  "dtlaunch ddp: shared-memory all_reduce unavailable (rank 3: "));
    }
  }
}

TEST_CASE("hierarchical all_reduce: a rank killed or frozen is named by the heartbeat",
          "[ddp][proc][heartbeat][hier]") {
  struct Case {
    const char* scenario;
    int victim;
    const char* how;
    double within;
  };
  // Rank 3 owns node 1's second slice; rank 2 node 1's first; rank 0 hosts the store.
  const Case c = GENERATE(Case{"kill", 3, "exited (its connection closed)", 3.0},
                          Case{"kill", 0, "exited (its connection closed)", 3.0},
                          Case{"freeze", 2, "frozen (silent for 3", kHeartbeatSeconds + 3.0});
  INFO(c.scenario << " rank " << c.victim);
  const std::vector<int> node_of{0, 0, 1, 1};
  auto env = heartbeat_env({{"DDP_TEST_VICTIM", std::to_string(c.victim)}});
  env["DTLAUNCH_DDP_SHM"] = "1";
  auto run = run_ranks(DDP_WORKER, {c.scenario}, 4, all_ranks(4), hier_env(node_of, env));
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 4);
  for (const auto& r : run.ranks) {
    if (r.rank == c.victim) continue;
    CHECK(has(r.output, "shm-segment: /dev/shm/"));
    CHECK(r.status == 3);
    CHECK(has(r.output, "error-kind: peer-lost"));
    CHECK(has(r.output,
              "peer lost (heartbeat, timeout 3 s): rank " + std::to_string(c.victim) + " ("));
    CHECK(has(r.output, c.how));
    CHECK(error_after_seconds(r.output) < c.within + 1.5 + 2.0);  // + the victim's delay
  }
}

// ---------------------------------------------------------------------------------------------
// The heartbeat during start-up (issue 21: "it holds during the rendezvous and during training
// alike"). 4 ranks, of which rank 2 never starts, so that the rendezvous cannot complete while
// the victim is lost in it: 1.5 s after its call into the runtime it SIGKILLs or SIGSTOPs itself.
// The two other ranks must name it as they would in training, long before the rendezvous
// timeout (8 s).

namespace {

constexpr double kStartupFaultSeconds = 1.5;

ddp_test::RankRun run_startup_fault(const std::string& fault, int victim) {
  return run_ranks(DDP_WORKER, {"rendezvous"}, 4, {0, 1, 3},
                   heartbeat_env({{"DDP_TEST_STARTUP_FAULT", fault},
                                  {"DDP_TEST_VICTIM", std::to_string(victim)},
                                  {"DDP_TEST_FREEZE_SECONDS", "5"},
                                  {"DDP_TEST_RENDEZVOUS_TIMEOUT_MS", "8000"}}),
                   std::chrono::seconds(60));
}

// The survivors that were in the rendezvous named the victim, how, within `within` seconds of
// their call into the runtime.
void check_named_in_startup(const ddp_test::RankRun& run, int victim, const std::string& how,
                            double within) {
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 3);
  for (const auto& r : run.ranks) {
    if (r.rank == victim) continue;
    INFO("rank " << r.rank);
    CHECK(r.status == 3);
    CHECK(has(r.output, "error-kind: peer-lost"));
    CHECK(
        has(r.output, "peer lost (heartbeat, timeout 3 s): rank " + std::to_string(victim) + " ("));
    CHECK(has(r.output, how));
    CHECK(has(r.output, ", during start-up"));
    if (victim == 0) CHECK(has(r.output, "which hosted the store"));
    CHECK(error_after_seconds(r.output) < within);
  }
}

}  // namespace

TEST_CASE("heartbeat: a rank or rank 0 killed during the rendezvous is named at once",
          "[ddp][proc][heartbeat]") {
  const int victim = GENERATE(1, 0);
  auto run = run_startup_fault("kill", victim);
  // The fault, the verdict's 0.3 s gathering, 2 s of slack for a loaded machine.
  check_named_in_startup(run, victim, "exited (its connection closed)",
                         kStartupFaultSeconds + 0.3 + 2.0);
}

TEST_CASE("heartbeat: a rank or rank 0 frozen during the rendezvous is named within the timeout",
          "[ddp][proc][heartbeat]") {
  const int victim = GENERATE(1, 0);
  auto run = run_startup_fault("freeze", victim);
  check_named_in_startup(run, victim, "frozen (silent for 3",
                         kStartupFaultSeconds + kHeartbeatSeconds + 0.3 + 2.0);
}

// The backend's connect: rank 2 comes 2.5 s late, after rank 1 froze (1.5 s) and before the
// verdict is due (4.5 s), so the rendezvous completes and the survivors wait in Gloo's connect for
// the frozen rank: all three must name it, and end within the heartbeat's timeout. Where the
// shutdown of the connections makes the backend return (LibTorch 1.13), the program gets the
// error; where Gloo waits for the frozen rank to dial in with no connection to shut down
// (LibTorch 2.6: ranks 2 and 3), the runtime ends the process itself, 3 s after the verdict,
// with the verdict and 76.
TEST_CASE("heartbeat: a rank frozen during the backend's connect is named within the timeout",
          "[ddp][proc][heartbeat]") {
  auto run = run_ranks(DDP_WORKER, {"rendezvous"}, 4, all_ranks(4),
                       heartbeat_env({{"DDP_TEST_STARTUP_FAULT", "freeze"},
                                      {"DDP_TEST_VICTIM", "1"},
                                      {"DDP_TEST_LATE_RANK", "2"},
                                      {"DDP_TEST_LATE_MS", "2500"},
                                      {"DDP_TEST_FREEZE_SECONDS", "6"},
                                      {"DDP_TEST_RENDEZVOUS_TIMEOUT_MS", "8000"}}),
                       std::chrono::seconds(60));
  INFO(describe(run));
  REQUIRE(run.ranks.size() == 4);
  for (const auto& r : run.ranks) {
    if (r.rank == 1) continue;
    INFO("rank " << r.rank);
    CHECK(has(r.output, "peer lost (heartbeat, timeout 3 s): rank 1 ("));
    CHECK(has(r.output, "frozen (silent for 3"));
    if (r.status == 76) {  // dtlaunch::ddp::kExitPeerLost
      CHECK(has(r.output,
                "; start-up was still blocked in the backend 3 s after the verdict: "
                "exiting with 76"));
    } else {
      CHECK(r.status == 3);
      CHECK(has(r.output, "error-kind: peer-lost"));
      CHECK(error_after_seconds(r.output) < kStartupFaultSeconds + kHeartbeatSeconds + 0.3 + 2.0);
    }
  }
  // A survivor still blocked at the limit (60 s) would have status -1: without the backstop,
  // ranks 2 and 3 were, on LibTorch 2.6.
}

// No false alarm: a rank that starts 10 s late (over three heartbeat timeouts, within the
// rendezvous timeout) on a machine at load 10 is waited for, not declared lost.
TEST_CASE("heartbeat: a rank that starts 10 s late under load is no false alarm",
          "[ddp][proc][heartbeat]") {
  BusyProcesses load(10);
  auto run = run_ranks(DDP_WORKER, {"late"}, 3, all_ranks(3),
                       heartbeat_env({{"DDP_TEST_LATE_RANK", "1"},
                                      {"DDP_TEST_LATE_MS", "10000"},
                                      {"DDP_TEST_RENDEZVOUS_TIMEOUT_MS", "40000"}}),
                       std::chrono::seconds(60));
  load.stop();
  require_all_ok(run);
  for (const auto& r : run.ranks) {
    CHECK(has(r.output, "late ok rank " + std::to_string(r.rank)));
    CHECK_FALSE(has(r.output, "peer lost"));
  }
}

// Issue 26 item 1, the class: bytes that arrive unasked at any time, not only at once. LibTorch
// 1.13's store client parsed them in a background thread (std::length_error, exit 134) once they
// came later than the 150 ms a rank used to listen for them. The peer here answers each request
// as a store with no identity yet would, then speaks unasked.
TEST_CASE("rendezvous: bytes sent unasked at any time give a typed error in time", "[ddp][proc]") {
  std::mt19937 rng(2601);
  std::vector<std::string> residues = {std::string(64, '\xff'), std::string(1, '\x03'),
                                       std::string(1, '\0') + std::string(8, '\x7f')};
  for (int i = 0; i < 2; ++i) residues.push_back(random_bytes(rng));
  for (size_t i = 0; i < residues.size(); ++i) {
    // Past the old 150 ms, and late in the 2 s timeout.
    const auto late = std::chrono::milliseconds(i % 2 ? 1200 : 300);
    const std::string& residue = residues[i];
    INFO("after " << late.count() << " ms: " << residue.size() << " bytes, the first "
                  << static_cast<int>(static_cast<unsigned char>(residue[0])));
    GarbageListener peer(residue, GarbageListener::kSpeakLate, late);
    const auto run = rank_1_against(peer);
    INFO(describe(run));
    REQUIRE(run.ranks.size() == 1);
    const std::string& out = run.ranks[0].output;
    CHECK(run.ranks[0].status == 3);
    CHECK(error_after_seconds(out) < 3.5);
#if DDP_TEST_OWN_STORE_CLIENT
    // Our own client (LibTorch 1.x) names them whether they came between two requests or in
    // place of an answer.
    CHECK(has(out, "error-kind: config"));
    CHECK(has(out, "a c10d TCPStore response was expected"));
#else
    // c10d's client (2.x) never aborts on them either: its ping's answer is refused (config,
    // backend), or a first byte that looks like the start of one leaves it waiting, which is
    // the silence of a stopped rank 0 (timeout), as in the test above.
    CHECK((has(out, "error-kind: config") || has(out, "error-kind: backend") ||
           has(out, "error-kind: timeout")));
#endif
  }
}
