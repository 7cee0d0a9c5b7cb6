// A task's side of the doctor's exchange: it reports to rank 0 and awaits the verdict,
// retrying with jittered back-off, because a listen backlog that overflows at scale is a known
// failure of rendezvous servers.
#include "doctor/client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/socket.hpp"
#include "doctor/network_test.hpp"
#include "doctor/probe.hpp"
#include "doctor/wire.hpp"

namespace dtlaunch::doctor {
namespace {

using Fd = core::UniqueFd;

std::string describe_connect_error(int error) {
  switch (error) {
    case ECONNREFUSED:
      return "connection refused";
    case ETIMEDOUT:
      return "timed out";
    case EHOSTUNREACH:
    case ENETUNREACH:
      return "no route to host";
    case EACCES:
    case EPERM:
      return "blocked by a firewall or route rule";
    default:
      return std::strerror(error);
  }
}

// The relayed "ring.RANK=TEXT" lines after the verdict's status (wire.hpp's Relay).
void read_relayed(const std::string& body, std::map<std::uint32_t, std::string>& received) {
  const std::string start = "\n" + std::string(kRelayedLine);
  std::size_t at = 0;
  while ((at = body.find(start, at)) != std::string::npos) {
    const std::size_t eq = body.find('=', at);
    const std::size_t end = body.find('\n', at + 1);
    if (eq == std::string::npos || end == std::string::npos || eq > end) break;
    received[static_cast<std::uint32_t>(std::stoul(body.substr(
        at + start.size(), eq - at - start.size())))] = body.substr(eq + 1, end - eq - 1);
    at = end;
  }
}

// One task's side of the exchange, on one address of rank 0.
class Reporter {
 public:
  Reporter(const std::string& where, std::uint32_t rank, const NetworkAgent* agent,
           const Relay& relay)
      : where_(where), rank_(rank), agent_(agent), relay_(relay) {}

  // Sends the reports on a connected socket; false when the connection was lost.
  bool send(int fd, std::vector<TaskReport>& mine, Clock::time_point answer_deadline) const {
    // Connected: the address the connection left from is this node's route to rank 0.
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    std::string local_addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0)
      local_addr = numeric_host(reinterpret_cast<sockaddr*>(&local), length);
    std::string out;
    for (TaskReport& r : mine) {
      r.network.local_addr = local_addr;
      r.clock.sent_unix_ms = unix_ms();
      const bool relays = out.empty() && !relay_.text.empty();  // with the first report
      out += frame(kReportMagic, encode(r) + (relays ? encode_line(kRelayKey, relay_.text) : ""));
    }
    return send_all(fd, out, answer_deadline);
  }

  // Reads until the verdict, running the network test plan that may come before it; returns
  // the status rank 0 decided. Throws Error(kProblem) when none comes.
  int await_verdict(int fd, Clock::time_point answer_deadline) const {
    std::string in;
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, millis_until(answer_deadline, 1000)) <= 0) {
        if (Clock::now() < answer_deadline) continue;
        throw failure(": connected to " + where_ +
                      " but no verdict came from rank 0 by the deadline");
      }
      char buffer[4096];
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0)
        throw failure(": " + where_ +
                      " closed the connection without a verdict: is something other than "
                      "dtlaunch doctor listening there?");
      in.append(buffer, static_cast<std::size_t>(n));
      try {
        if (take_plan(fd, in, answer_deadline)) continue;
        if (auto body = take_frame(in, kVerdictMagic)) {
          if (relay_.received) read_relayed(*body, *relay_.received);
          return body->find("status=0") == 0 ? 0 : 3;
        }
      } catch (const std::exception&) {
        throw failure(": " + where_ +
                      " does not speak dtlaunch doctor's protocol (another program on that "
                      "port?)");
      }
    }
  }

  core::Error failure(const std::string& what) const {
    return core::Error(core::ExitCode::kProblem, "rank " + std::to_string(rank_) + what);
  }

 private:
  // Before the verdict, a node's agent may get its network test plan: runs it and sends the
  // results, and the verdict is then awaited that much longer. True when `in` began with a plan.
  bool take_plan(int fd, std::string& in, Clock::time_point& answer_deadline) const {
    if (!agent_ || in.size() < 4 + kPlanMagic.size() ||
        std::string_view(in).substr(4, kPlanMagic.size()) != kPlanMagic)
      return false;
    if (auto body = take_frame(in, kPlanMagic)) {
      const Clock::time_point end = run_plan(fd, *body, *agent_);
      answer_deadline = std::max(answer_deadline, end + std::chrono::seconds(5));
    }
    return true;
  }

  std::string where_;
  std::uint32_t rank_;
  const NetworkAgent* agent_;
  const Relay& relay_;
};

}  // namespace

int report_to_rank0(const std::string& addr, std::uint16_t port, std::vector<TaskReport> mine,
                    Clock::time_point deadline, const NetworkAgent* agent,
                    Clock::duration network_budget, const Relay& relay) {
  const std::string where = addr + ":" + std::to_string(port);
  const Reporter reporter(where, mine.front().contract.rank, agent, relay);
  std::mt19937 jitter(std::random_device{}() ^ static_cast<unsigned>(mine.front().contract.rank));
  auto pause = std::chrono::milliseconds(20);
  std::string last_failure = "no attempt was made";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found);
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
    if (rc != 0) last_failure = "name not resolved (" + std::string(::gai_strerror(rc)) + ")";
    for (const addrinfo* a = rc == 0 ? found : nullptr; a; a = a->ai_next) {
      const int connected = core::connect_until(*a, deadline);
      std::string resolved = numeric_host(a->ai_addr, a->ai_addrlen);
      if (resolved.empty()) resolved = addr;
      if (connected < 0) {
        last_failure =
            describe_connect_error(-connected) + " at " + resolved + ":" + std::to_string(port);
        continue;
      }
      const Fd fd(connected);
      // Rank 0 may have started later than this task: wait for its verdict a little past our
      // own deadline, since it judges at its own.
      const auto answer_deadline = deadline + std::chrono::seconds(5) + network_budget;
      if (!reporter.send(fd.get(), mine, answer_deadline)) {
        last_failure = "connection lost while sending to " + resolved;
        continue;
      }
      return reporter.await_verdict(fd.get(), answer_deadline);
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::uniform_int_distribution<int> spread(50, 150);
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause * spread(jitter) / 100, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
  throw reporter.failure(" on " + mine.front().network.host + " cannot reach rank 0 at " + where +
                         ": " + last_failure);
}

}  // namespace dtlaunch::doctor
