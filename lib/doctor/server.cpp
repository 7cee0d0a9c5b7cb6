// Rank 0's side of the doctor's exchange: every task is served from one epoll loop (a thread
// per client does not scale to thousands of tasks, nor does a poll() set rebuilt on every
// wake-up).
#include "doctor/server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/file.hpp"
#include "core/text.hpp"
#include "doctor/probe.hpp"
#include "doctor/wire.hpp"

namespace dtlaunch::doctor {
namespace {

using Fd = core::UniqueFd;

Fd listen_on(std::uint16_t port, int& error) {
  // Every interface, as PyTorch's TCPStore binds: the program will listen the same way.
  for (int family : {AF_INET6, AF_INET}) {
    Fd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
      error = errno;
      continue;
    }
    const int one = 1, zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage address{};
    socklen_t length = 0;
    if (family == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&address);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(port);
      length = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&address);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(port);
      length = sizeof *a;
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(fd.get(), SOMAXCONN) != 0) {
      error = errno;
      if (error == EADDRINUSE) return Fd();
      continue;
    }
    return fd;
  }
  return Fd();
}

// What rank 0 accepts, so that nothing a peer sends makes it grow without bound: one connection
// comes from one node (a task, or a local launcher with its workers), so it carries at most
// the ranks of the largest node; all together at most twice the job (duplicates are a finding
// of their own) and 64 MiB + 8 KiB per rank.
struct ServeLimits {
  struct Bound {
    std::uint64_t frames = 0;
    std::uint64_t bytes = 0;
  };
  Bound per_connection;
  Bound all;  // every connection's together
  std::size_t connections = 0;
};

ServeLimits serve_limits(const Expectation& expected) {
  ServeLimits limits;
  std::map<std::uint32_t, std::uint32_t> per_node;
  std::uint32_t largest = 0;
  for (const ExpectedRank& r : expected.ranks) largest = std::max(largest, ++per_node[r.node]);
  limits.per_connection.frames = std::max<std::uint32_t>(
      1, largest > 0 ? largest : std::max<std::uint32_t>(expected.world_size, 1));
  limits.per_connection.bytes =
      static_cast<std::uint64_t>(limits.per_connection.frames) * (kMaxFrame + 4);
  limits.all.frames = 2ull * expected.world_size + 16;
  // 64 MiB, and 8 KiB more per rank: a report is about 1 KiB (a node's lowest local rank adds its
  // library list), so a flat 64 MiB refused real jobs above ~60,000 ranks.
  limits.all.bytes = (64ull << 20) + 8192ull * expected.world_size;
  // Every node keeps its connection open for the verdict, plus room for strays; never more
  // than the descriptor table holds.
  limits.connections = expected.world_size + 64;
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      nofile.rlim_cur > 32)
    limits.connections = std::min<std::size_t>(limits.connections, nofile.rlim_cur - 32);
  return limits;
}

// Connections rank 0 cut off or turned away, for one warning in the verdict.
class PeerTrouble {
 public:
  void note(const std::string& peer, std::string why) {
    if (count_++ == 0) first_ = (peer.empty() ? std::string() : "from " + peer + ": ") + why;
  }
  std::vector<Problem> problems(std::uint16_t port) const {
    if (count_ == 0) return {};
    return {{"bad-peer",
             Severity::kWarning,
             {},
             {},
             "rank 0 cut off or turned away " + std::to_string(count_) + " connection" +
                 (count_ == 1 ? "" : "s") + " to port " + std::to_string(port) +
                 " that broke the doctor's protocol or its bounds (the first " + first_ +
                 "); another program is reaching this port"}};
  }

 private:
  std::size_t count_ = 0;
  std::string first_;
};

// Why rank 0 cannot listen on the port, by its real cause: the program's rendezvous would
// fail the same way.
Problem listen_problem(std::uint16_t port, const std::string& host, int error) {
  const std::string where = " on port " + std::to_string(port) + " of " + core::excerpt(host, 64) +
                            ": " + std::strerror(error);
  if (error == EACCES || error == EPERM) {
    std::string start = "1024";
    if (auto text = core::read_file_head("/proc/sys/net/ipv4/ip_unprivileged_port_start", 32)) {
      while (!text->empty() && text->back() == '\n') text->pop_back();
      if (!text->empty()) start = *text;
    }
    return {"port-not-permitted",
            Severity::kError,
            {0},
            {host},
            "rank 0 may not listen" + where + ": ports below " + start +
                " need root or CAP_NET_BIND_SERVICE (net.ipv4.ip_unprivileged_port_start); "
                "choose a port from " +
                start + " up"};
  }
  if (error == EADDRINUSE)
    return {"port-in-use",
            Severity::kError,
            {0},
            {host},
            "rank 0 cannot listen" + where +
                " (another job or a stale process holds it; the program's rendezvous would "
                "fail the same way)"};
  return {"port-unusable",
          Severity::kError,
          {0},
          {host},
          "rank 0 cannot listen" + where + " (the program's rendezvous would fail the same way)"};
}

// Rank 0's check-in: every task's reports over one epoll set for the listener and every client
// (poll() rebuilt and scanned every client on every wake-up: quadratic at 100k tasks). A client
// keeps its slot until it is dropped, so epoll's data is the slot; freed slots are reused.
class CheckIn {
 public:
  CheckIn(const Expectation& expected, std::vector<TaskReport> own, Fd listener, const Relay& relay)
      : limits_(serve_limits(expected)),
        world_(expected.world_size),
        relay_(relay),
        listener_(std::move(listener)),
        reports_(std::move(own)),
        seen_(expected.world_size, false) {
    for (const TaskReport& r : reports_) count(r);
    if (!relay.text.empty()) relayed_[reports_.front().contract.rank] = relay.text;
    if (epoll_.get() < 0) throw core::Error::system("doctor: epoll_create1", errno);
    epoll_event listen_event{EPOLLIN, {.u64 = kListener}};
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &listen_event) != 0)
      throw core::Error::system("doctor: epoll_ctl", errno);
  }

  // Takes reports until every rank has reported or the deadline passes.
  void run(Clock::time_point deadline) {
    std::vector<epoll_event> events(1024);
    while (distinct_ < world_ && Clock::now() < deadline) {
      const int ready = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                                     millis_until(deadline, 200));
      if (ready < 0 && errno != EINTR) throw core::Error::system("doctor: epoll_wait", errno);
      bool accept_now = false;
      for (int k = 0; k < ready; ++k) {
        if (events[k].data.u64 == kListener)
          accept_now = true;
        else
          read_from(static_cast<std::size_t>(events[k].data.u64));
      }
      if (accept_now) accept_all();
    }
  }

  std::vector<TaskReport> take_reports() { return std::move(reports_); }

  // The texts the relay hands back to `rank` (wire.hpp's Relay), by rank, in the order wanted.
  std::vector<std::pair<std::uint32_t, const std::string*>> relayed_to(std::uint32_t rank) const {
    std::vector<std::pair<std::uint32_t, const std::string*>> out;
    if (!relay_.wanted) return out;
    for (const std::uint32_t r : relay_.wanted(rank, world_))
      if (const auto it = relayed_.find(r); it != relayed_.end()) out.emplace_back(r, &it->second);
    return out;
  }
  std::vector<Problem> trouble(std::uint16_t port) const { return trouble_.problems(port); }

  // The nodes whose agent takes part in the network test: (its descriptor, its report).
  std::vector<std::pair<std::size_t, std::size_t>> agents() const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (const Client& c : clients_)
      if (c.fd.get() >= 0 && c.network_report != std::string::npos)
        out.emplace_back(static_cast<std::size_t>(c.fd.get()), c.network_report);
    return out;
  }

  // The verdict goes back to every task, so that every task exits with the same status; then
  // the clients close first, which leaves no TIME_WAIT on rank 0's port for the program.
  void answer(const Diagnosis& verdict) {
    listener_.reset();
    const std::string status = "status=" + std::to_string(verdict.ok() ? 0 : 3) + "\n";
    const auto send_deadline = Clock::now() + std::chrono::seconds(2);
    for (Client& c : clients_)
      if (c.fd.get() >= 0)
        send_all(c.fd.get(), frame(kVerdictMagic, status + relayed_lines(c.ranks)), send_deadline);
    for (Client& c : clients_) {
      if (c.fd.get() < 0) continue;
      pollfd p{c.fd.get(), POLLIN, 0};
      char sink[256];
      while (::poll(&p, 1, millis_until(send_deadline, 200)) > 0 &&
             ::recv(c.fd.get(), sink, sizeof sink, 0) > 0) {
      }
    }
  }

 private:
  static constexpr std::uint64_t kListener = ~std::uint64_t{0};

  struct Client {
    Fd fd;
    std::string peer;
    std::string in;
    std::uint32_t frames = 0;
    std::uint64_t bytes = 0;
    std::uint64_t generation = 0;
    std::size_t network_report = std::string::npos;  // its report with a network test port
    std::vector<std::uint32_t> ranks;                // of its reports with a relayed text
  };

  // What the relay hands back to a connection's `ranks`, as "ring.RANK=TEXT" lines: only what
  // each of them wants (O(1) per task for --watch).
  std::string relayed_lines(const std::vector<std::uint32_t>& ranks) const {
    std::string lines;
    for (const std::uint32_t mine : ranks)
      for (const auto& [r, text] : relayed_to(mine))
        lines += std::string(kRelayedLine) + std::to_string(r) + "=" + *text + "\n";
    return lines;
  }

  void count(const TaskReport& r) {
    if (r.contract.rank < seen_.size() && !seen_[r.contract.rank]) {
      seen_[r.contract.rank] = true;
      ++distinct_;
    }
  }

  void drop(std::size_t slot) {
    clients_[slot].fd.reset();  // closing removes it from the epoll set
    clients_[slot].in = std::string();
    clients_[slot].network_report = std::string::npos;
    clients_[slot].ranks.clear();
    free_slots_.push_back(slot);
    --open_clients_;
  }

  void read_from(std::size_t slot) {
    Client& c = clients_[slot];
    if (c.fd.get() < 0) return;  // dropped earlier in this round
    char buffer[16384];
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
    if (n <= 0) {
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) drop(slot);  // gone: released
      return;
    }
    c.bytes += static_cast<std::uint64_t>(n);
    c.in.append(buffer, static_cast<std::size_t>(n));
    try {
      take_frames(c);
    } catch (const std::exception& e) {
      // Not one of ours, or not within bounds (a port scanner, a stale or hostile client):
      // cut off, said once in the verdict.
      trouble_.note(c.peer, e.what());
      drop(slot);
    }
  }

  // The complete reports in the client's buffer, within the bounds; throws past them.
  void take_frames(Client& c) {
    while (auto body = take_frame(c.in, kReportMagic)) {
      ++c.frames;
      ++total_frames_;
      total_bytes_ += body->size();
      if (c.frames > limits_.per_connection.frames)
        throw std::runtime_error("more than " + std::to_string(limits_.per_connection.frames) +
                                 " reports on one connection");
      if (total_frames_ > limits_.all.frames || total_bytes_ > limits_.all.bytes)
        throw std::runtime_error("the reports of all connections passed rank 0's bound (" +
                                 std::to_string(limits_.all.frames) + " reports, " +
                                 std::to_string(limits_.all.bytes >> 20) + " MiB)");
      std::optional<std::string> relayed = take_line(*body, kRelayKey);
      TaskReport r = decode(*body);
      r.clock.received_unix_ms = unix_ms();
      count(r);
      if (r.network_test_port != 0) c.network_report = reports_.size();
      if (relayed && !relayed->empty()) {
        c.ranks.push_back(r.contract.rank);
        relayed_[r.contract.rank] = std::move(*relayed);
      }
      reports_.push_back(std::move(r));
    }
    if (c.bytes > limits_.per_connection.bytes)
      throw std::runtime_error("more than " + std::to_string(limits_.per_connection.bytes) +
                               " bytes on one connection");
    if (c.in.empty()) c.in = std::string();  // a complete node's reports: no buffer kept
  }

  // Accepts everything queued: the backlog is the scarce resource at scale.
  void accept_all() {
    for (;;) {
      sockaddr_storage from{};
      socklen_t length = sizeof from;
      const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if ((errno == EMFILE || errno == ENFILE) && shed_one()) continue;
        break;
      }
      std::string peer = numeric_host(reinterpret_cast<sockaddr*>(&from), length);
      if (open_clients_ >= limits_.connections && !make_room(peer)) {
        ::close(fd);
        continue;
      }
      add_client(fd, std::move(peer));
    }
    trim_accept_order();
  }

  // Out of descriptors: the one kept in reserve makes room to accept and close a connection,
  // which would otherwise stay queued and keep epoll_wait() returning at once.
  bool shed_one() {
    if (!reserve_) return false;
    reserve_.reset();
    Fd shed(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (shed) trouble_.note("", "refused: rank 0 has no descriptor left for it");
    reserve_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    return static_cast<bool>(shed);
  }

  // Full: the oldest connection that has sent no report yet makes room; if every one has, the
  // newcomer is turned away (false).
  bool make_room(const std::string& peer) {
    std::optional<std::size_t> idle;
    while (!accept_order_.empty() && !idle) {
      const auto [slot, generation] = accept_order_.front();
      accept_order_.pop_front();
      if (silent(slot, generation)) idle = slot;
    }
    if (!idle) {
      trouble_.note(peer, "refused: " + std::to_string(limits_.connections) +
                              " connections are open already");
      return false;
    }
    trouble_.note(clients_[*idle].peer, "closed to make room: it had sent nothing");
    drop(*idle);
    return true;
  }

  void add_client(int fd, std::string peer) {
    std::size_t slot = clients_.size();
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      clients_.emplace_back();
    }
    clients_[slot] =
        Client{Fd(fd), std::move(peer), {}, 0, 0, ++generations_, std::string::npos, {}};
    ++open_clients_;
    accept_order_.emplace_back(slot, generations_);
    epoll_event e{EPOLLIN, {.u64 = slot}};
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &e) != 0) drop(slot);
  }

  bool silent(std::size_t slot, std::uint64_t generation) const {
    const Client& c = clients_[slot];
    return c.generation == generation && c.fd.get() >= 0 && c.frames == 0;
  }

  // Entries of clients that have reported or gone can never make room: trimmed, so that the
  // queue stays as long as the connections that are still silent.
  void trim_accept_order() {
    while (!accept_order_.empty() &&
           !silent(accept_order_.front().first, accept_order_.front().second))
      accept_order_.pop_front();
  }

  const ServeLimits limits_;
  const std::uint32_t world_;
  const Relay& relay_;
  std::map<std::uint32_t, std::string> relayed_;  // each rank's text, when it sent one
  Fd listener_;
  Fd reserve_{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  const Fd epoll_{::epoll_create1(EPOLL_CLOEXEC)};
  std::vector<Client> clients_;
  std::vector<std::size_t> free_slots_;
  std::size_t open_clients_ = 0;
  std::deque<std::pair<std::size_t, std::uint64_t>> accept_order_;  // (slot, generation)
  std::uint64_t generations_ = 0;
  std::vector<TaskReport> reports_;
  std::vector<bool> seen_;
  std::uint32_t distinct_ = 0;
  std::uint64_t total_frames_ = 0, total_bytes_ = 0;
  PeerTrouble trouble_;
};

}  // namespace

Diagnosis serve(const Expectation& expected, std::vector<TaskReport> own, std::uint16_t port,
                Clock::time_point deadline, const NetworkOptions& network,
                const NetworkAgent* own_agent, const Relay& relay) {
  // Rank 0's own reports arrive now, on rank 0's clock: the time they were probed is not
  // when they were sent (probing takes seconds on a loaded node, which read as clock skew).
  const std::int64_t now_ms = unix_ms();
  for (TaskReport& r : own) r.clock.sent_unix_ms = r.clock.received_unix_ms = now_ms;
  int error = 0;
  Fd listener = listen_on(port, error);
  if (listener.get() < 0) {
    const TaskReport& r0 = own.front();
    Diagnosis verdict;
    verdict.reports = std::move(own);
    verdict.problems.push_back(listen_problem(port, r0.network.host, error));
    return verdict;
  }
  const std::uint32_t own_rank = own.front().contract.rank;
  CheckIn check_in(expected, std::move(own), std::move(listener), relay);
  check_in.run(deadline);
  std::vector<Problem> found = check_in.trouble(port);
  std::vector<TaskReport> reports = check_in.take_reports();
  std::vector<NetworkLink> links;
  std::string summary;
  if (network.enabled) {
    std::vector<Problem> slow =
        test_network(links, summary, reports, check_in.agents(), network, own_agent);
    found.insert(found.end(), slow.begin(), slow.end());
  }
  Diagnosis verdict = diagnose(expected, std::move(reports), std::move(found));
  verdict.network = std::move(links);
  verdict.network_summary = std::move(summary);
  check_in.answer(verdict);
  if (relay.received && !relay.text.empty())
    for (const auto& [r, text] : check_in.relayed_to(own_rank)) (*relay.received)[r] = *text;
  return verdict;
}

}  // namespace dtlaunch::doctor
