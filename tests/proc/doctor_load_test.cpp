// Rank 0's server (doctor::serve) with a large, honest job in-process: every connection is a node
// of 8 ranks, as a local-mode launcher sends them, from one non-blocking client loop.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "doctor/probe.hpp"
#include "doctor/server.hpp"
#include "dtlaunch_catch.hpp"
#include "launch/system.hpp"

using namespace dtlaunch::doctor;

TEST_CASE("doctor serve: a job whose reports pass 64 MiB in all is served whole") {
  // 9,000 ranks of ~7.5 KiB (a long CPU list): 66 MiB in all, each connection well within its
  // own bound. A flat 64 MiB bound on all reports turned away the last nodes, as it would the
  // ~1 KiB reports of a 131,072-rank job.
  constexpr std::uint32_t kNodes = 1125, kPerNode = 8, kWorld = kNodes * kPerNode;
  std::vector<std::string> hosts;
  for (std::uint32_t n = 0; n < kNodes; ++n) hosts.push_back("node" + std::to_string(n + 1));
  const Expectation expected =
      slurm_expectation(hosts, std::vector<std::uint32_t>(kNodes, kPerNode), "block");
  const std::uint16_t port = dtlaunch::launch::find_free_port();
  auto report = [&](std::uint32_t rank) {
    TaskReport r;
    r.contract.rank = rank;
    r.contract.local_rank = rank % kPerNode;
    r.contract.node_rank = rank / kPerNode;
    r.contract.world_size = kWorld;
    r.contract.nnodes = kNodes;
    r.network.host = hosts[rank / kPerNode];
    r.contract.master_addr = "127.0.0.1";
    r.contract.master_port = port;
    r.placement.cpus = std::string(7600, '0');
    r.clock.sent_unix_ms = unix_ms();
    return r;
  };
  std::vector<TaskReport> own;
  for (std::uint32_t k = 0; k < kPerNode; ++k) own.push_back(report(k));
  Diagnosis verdict;
  std::thread server([&] {
    verdict = serve(expected, std::move(own), port, Clock::now() + std::chrono::seconds(60));
  });
  std::vector<int> fds;
  std::uint32_t answered = 0;
  for (std::uint32_t node = 1; node < kNodes; ++node) {
    std::vector<TaskReport> mine;
    for (std::uint32_t k = 0; k < kPerNode; ++k) mine.push_back(report(node * kPerNode + k));
    const std::string frames = report_frames(mine);
    int fd = -1;
    for (int attempt = 0; attempt < 500 && fd < 0; ++attempt) {  // until rank 0 listens
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      to.sin_port = htons(port);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
        ::close(fd);
        fd = -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    REQUIRE(fd >= 0);
    std::size_t sent = 0;
    while (sent < frames.size()) {
      const ssize_t n = ::send(fd, frames.data() + sent, frames.size() - sent, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      sent += static_cast<std::size_t>(n);
    }
    fds.push_back(fd);
  }
  for (int fd : fds) {
    std::string in;
    char buffer[256];
    std::optional<int> status;
    pollfd p{fd, POLLIN, 0};
    while (!status && ::poll(&p, 1, 60000) == 1) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      in.append(buffer, static_cast<std::size_t>(n));
      status = take_verdict(in);
    }
    answered += status == 0;
    ::close(fd);
  }
  server.join();
  CHECK(verdict.reports.size() == kWorld);
  // A report's clock is read when this test builds it; under the sanitizers 9,000 of them take
  // seconds to send, which reads as clock skew, and on a loaded machine more than 10 s, which
  // reads as a slow start (23 s of wall time for 5.6 s of CPU at load 15-19, seen). The subject
  // here is the byte bound: the timing warnings are left out, every other problem counts.
  size_t problems = 0;
  for (const Problem& p : verdict.problems) {
    if (p.kind == "clock-skew" || p.kind == "slow-start") continue;
    UNSCOPED_INFO(p.kind << ": " << p.message.substr(0, 200));
    ++problems;
  }
  CHECK(problems == 0);
  CHECK(answered == kNodes - 1);
}
