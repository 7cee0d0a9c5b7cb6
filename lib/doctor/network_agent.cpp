// The network test's agent: the sockets and threads of one node's tests and of its answers to
// the other nodes' (network_agent.hpp).
#include "doctor/network_agent.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/socket.hpp"

namespace dtlaunch::doctor {
namespace {

constexpr std::string_view kHello = "DTLNET1\n";
constexpr std::uint64_t kMaxTransfer = 1ull << 30;
constexpr std::size_t kMaxAnswering = 64;  // connections answered at once; more are closed
constexpr std::size_t kChunk = 1 << 20;
const std::vector<char>& zeros() {
  static const std::vector<char> buffer(kChunk, 0);
  return buffer;
}

using Ms = std::chrono::milliseconds;

void set_timeouts(int fd, Clock::duration left) {
  const auto us = std::max<std::int64_t>(
      1000, std::chrono::duration_cast<std::chrono::microseconds>(left).count());
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Blocking I/O bounded by the socket timeouts; `done` counts what went through.
bool send_bytes(int fd, const char* data, std::uint64_t n, std::uint64_t& done) {
  while (done < n) {
    const ssize_t k =
        ::send(fd, data ? data + done : zeros().data(),
               static_cast<std::size_t>(std::min<std::uint64_t>(n - done, kChunk)), MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<std::uint64_t>(k);
  }
  return true;
}

bool recv_bytes(int fd, char* into, std::uint64_t n, std::uint64_t& done) {
  static thread_local std::vector<char> sink(kChunk);
  while (done < n) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, kChunk));
    const ssize_t k = ::recv(fd, into ? into + done : sink.data(), want, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<std::uint64_t>(k);
  }
  return true;
}

bool send_all_bytes(int fd, std::string_view data) {
  std::uint64_t done = 0;
  return send_bytes(fd, data.data(), data.size(), done);
}

bool recv_exact(int fd, char* into, std::size_t n) {
  std::uint64_t done = 0;
  return recv_bytes(fd, into, n, done);
}

std::string command(char what, std::uint64_t n) {
  std::string out(9, '\0');
  out[0] = what;
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(n >> (56 - 8 * i));
  return out;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Connects to address:port before `end`; -1 and `error` when it cannot.
int connect_to(const std::string& address, std::uint16_t port, Clock::time_point end,
               std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    error = "cannot resolve " + address + ": " + ::gai_strerror(rc);
    return -1;
  }
  std::string why = "no address";
  int connected = -1;
  for (const addrinfo* a = found; a && connected < 0; a = a->ai_next) {
    const int fd = core::connect_until(*a, end, std::chrono::milliseconds::max());
    if (fd < 0) {
      why = "cannot connect to " + address + ":" + std::to_string(port) + ": " + std::strerror(-fd);
      continue;
    }
    ::fcntl(fd, F_SETFL, 0);  // blocking, bounded by the socket timeouts
    connected = fd;
  }
  ::freeaddrinfo(found);
  if (connected < 0) error = why;  // untouched on success
  return connected;
}

// One direction's throughput: transfers of doubling size until the next would pass `phase_end`.
// Each is timed by its receiver, from its first byte (the command, for an upload) to its last,
// so that neither the command nor the acknowledgement crosses the other direction, which may be
// the slow one (a full queue on the peer's side delays its 'A' by up to tbf's latency). The best
// rate of the transfers that took 2 ms or more is kept (noise only ever lowers a rate; a shorter
// one measures little but the socket buffers). -1 when nothing was measured; `broken` when a
// transfer did not finish (the connection is then out of step).
double measure(int fd, char direction, Clock::time_point phase_end, bool& broken) {
  double best = -1, last = -1;
  std::uint64_t n = 64 * 1024;
  while (Clock::now() < phase_end) {
    set_timeouts(fd, phase_end - Clock::now() + Ms(200));
    const auto t0 = Clock::now();
    std::uint64_t done = 0;
    double seconds = 0;
    bool ok = send_all_bytes(fd, command(direction, n));
    if (ok && direction == 'U') {
      unsigned char ack[9] = {};
      ok = send_bytes(fd, nullptr, n, done) &&
           recv_exact(fd, reinterpret_cast<char*>(ack), sizeof ack) && ack[0] == 'A';
      std::uint64_t ns = 0;
      for (int i = 1; i < 9; ++i) ns = ns << 8 | ack[i];
      seconds = static_cast<double>(ns) / 1e9;
    } else if (ok) {
      char first = 0;  // the clock starts when the first byte is in
      ok = n > 0 && recv_exact(fd, &first, 1);
      const auto t1 = Clock::now();
      done = 1;
      ok = ok && recv_bytes(fd, nullptr, n, done);
      seconds = seconds_since(t1);
    }
    const double elapsed = std::max(seconds_since(t0), 1e-6);
    if (!ok) {
      broken = true;  // what went through before the deadline is a lower bound of the rate
      return std::max(best, static_cast<double>(done) / elapsed);
    }
    last = static_cast<double>(n) / std::max(seconds, 1e-6);
    if (seconds >= 0.002) best = std::max(best, last);
    if (Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(2.2 * elapsed)) >
        phase_end)
      break;
    n = std::min(n * 2, kMaxTransfer);
  }
  return best >= 0 ? best : last;
}

// A connection to the peer's agent, greeted; -1 and `error` when it cannot be made.
int open_test(const NetworkPeer& peer, Clock::time_point end, std::string& error) {
  const int fd = connect_to(peer.address, peer.port, end, error);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeouts(fd, end - Clock::now());
  if (send_all_bytes(fd, kHello)) return fd;
  error = peer.address + " did not answer";
  ::close(fd);
  return -1;
}

LinkResult test_peer(std::uint32_t from, const NetworkPeer& peer, Clock::time_point start,
                     Clock::time_point end) {
  LinkResult result{from, peer.node, 0, 0, 0, ""};
  int fd = open_test(peer, end, result.error);
  if (fd < 0) return result;  // zero rates: a link that does not work is as slow as can be
  const auto span = end - start;
  std::vector<double> rtts;
  bool broken = false;
  const auto pings_end = start + span / 10;
  while (!broken && rtts.size() < 16 && (rtts.size() < 3 || Clock::now() < pings_end)) {
    const auto t0 = Clock::now();
    char echo = 0;
    if (!send_all_bytes(fd, "P") || !recv_exact(fd, &echo, 1) || echo != 'P')
      broken = true;
    else
      rtts.push_back(seconds_since(t0) * 1e6);
  }
  if (!rtts.empty()) result.rtt_us = robust_spread(rtts).median;
  result.up_bytes_per_s = broken ? -1 : measure(fd, 'U', start + span * 11 / 20, broken);
  if (broken && !rtts.empty()) {
    // An upload that overran its phase (a throttled sender whose queue also carries the
    // acknowledgements of other tests) leaves the connection out of step. The other direction
    // is still measured, on a fresh connection: without it the job's median is taken over
    // fewer healthy directions, and the slow node can go unnamed (the Slurm scenario did).
    ::close(fd);
    std::string ignored;
    fd = open_test(peer, end, ignored);
    broken = fd < 0;
  }
  result.down_bytes_per_s = broken ? -1 : measure(fd, 'D', end - span / 20, broken);
  if (!broken) send_all_bytes(fd, "Q");
  if (rtts.empty() && result.up_bytes_per_s < 0) result.error = peer.address + " did not answer";
  if (fd >= 0) ::close(fd);
  return result;
}

}  // namespace

std::unique_ptr<NetworkAgent> NetworkAgent::start() {
  for (int family : {AF_INET6, AF_INET}) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage address{};
    socklen_t length = 0;
    if (family == AF_INET6) {
      const int zero = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&address);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      length = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&address);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      length = sizeof *a;
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ::close(fd);
      continue;
    }
    const std::uint16_t port =
        ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                 : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    std::unique_ptr<NetworkAgent> agent(new NetworkAgent(fd, port));
    agent->server_ = std::thread([a = agent.get()] { a->serve(); });
    return agent;
  }
  return nullptr;
}

NetworkAgent::NetworkAgent(int listener, std::uint16_t port) : listener_(listener), port_(port) {}

NetworkAgent::~NetworkAgent() {
  stopping_ = true;
  ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
  if (server_.joinable()) server_.join();
  {
    const std::lock_guard lock(mutex_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : answering_) t.join();
  ::close(listener_);
}

void NetworkAgent::serve() {
  while (!stopping_) {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    const std::lock_guard lock(mutex_);
    // At most kMaxAnswering at once, and 16x that in all: each answer's thread is joined only
    // when the agent ends, and a stranger connecting in a loop must not pile them up.
    if (stopping_ || open_.size() >= kMaxAnswering || answering_.size() >= 16 * kMaxAnswering) {
      ::close(fd);
      continue;
    }
    open_.push_back(fd);
    answering_.emplace_back([this, fd] { answer(fd); });
  }
}

void NetworkAgent::answer(int fd) {
  // A peer that stalls is dropped after 10 s; one that sends more than 16 GiB is dropped too.
  set_timeouts(fd, std::chrono::seconds(10));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char hello[8];
  std::uint64_t total = 0;
  if (recv_exact(fd, hello, sizeof hello) && std::string_view(hello, 8) == kHello) {
    for (;;) {
      char what = 0;
      if (!recv_exact(fd, &what, 1)) break;
      if (what == 'P') {
        if (!send_all_bytes(fd, "P")) break;
        continue;
      }
      if (what != 'U' && what != 'D') break;
      unsigned char size[8];
      if (!recv_exact(fd, reinterpret_cast<char*>(size), 8)) break;
      std::uint64_t n = 0;
      for (unsigned char b : size) n = n << 8 | b;
      total += n;
      if (n > kMaxTransfer || total > 16 * kMaxTransfer) break;
      std::uint64_t done = 0;
      if (what == 'D') {
        if (!send_bytes(fd, nullptr, n, done)) break;
        continue;
      }
      // An upload is timed here, from its command to its last byte: 'A' and the nanoseconds.
      const auto t0 = Clock::now();
      if (!recv_bytes(fd, nullptr, n, done)) break;
      const auto ns = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
      if (!send_all_bytes(fd, command('A', ns))) break;
    }
  }
  const std::lock_guard lock(mutex_);
  open_.erase(std::find(open_.begin(), open_.end(), fd));
  ::close(fd);
}

std::vector<LinkResult> NetworkAgent::run(const NetworkPlan& plan, Clock::time_point end) const {
  std::vector<LinkResult> results;
  auto start = Clock::now();
  for (const NetworkPeer& peer : plan.peers) {
    const auto slot_end = std::min(start + plan.slot, end);
    if (slot_end <= Clock::now()) break;
    results.push_back(test_peer(plan.node, peer, start, slot_end));
    start = slot_end;
    // Every node keeps to the same slots, so that the tests of one round run together.
    std::this_thread::sleep_until(start);
  }
  return results;
}

}  // namespace dtlaunch::doctor
