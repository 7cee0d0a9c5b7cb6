// The doctor's TCP exchange. Rank 0 serves every task from one epoll loop (a thread per client
// does not scale to thousands of tasks, nor does a poll() set rebuilt on every wake-up); the
// tasks retry with jittered back-off, because a listen backlog that overflows at scale is a
// known failure of rendezvous servers.
#include <fcntl.h>
#include <netdb.h>
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
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/file.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"
#include "doctor/network.hpp"
#include "doctor/probe.hpp"

namespace dtlaunch::doctor {
namespace {

constexpr std::string_view kReportMagic = "DTLAUNCH-DOCTOR 1 report\n";
constexpr std::string_view kVerdictMagic = "DTLAUNCH-DOCTOR 1 verdict\n";
constexpr std::string_view kPlanMagic = "DTLAUNCH-DOCTOR 1 network plan\n";
constexpr std::string_view kResultMagic = "DTLAUNCH-DOCTOR 1 network result\n";
constexpr std::size_t kMaxFrame = 64 * 1024;

using Fd = core::UniqueFd;

int millis_until(Clock::time_point deadline, int cap_ms) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, cap_ms));
}

std::string frame(std::string_view magic, std::string_view body) {
  const std::string payload = std::string(magic) + std::string(body);
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + payload;
}

// Takes one complete frame off the front of `buffer`, if there is one. Throws on a frame that
// is too large or does not begin with `magic`: the peer does not speak this protocol.
std::optional<std::string> take_frame(std::string& buffer, std::string_view magic) {
  if (buffer.size() < 4) return std::nullopt;
  const auto byte = [&](int i) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(buffer[i]));
  };
  const std::uint32_t n = byte(0) << 24 | byte(1) << 16 | byte(2) << 8 | byte(3);
  if (n > kMaxFrame || n < magic.size()) throw std::runtime_error("not a dtlaunch doctor frame");
  if (buffer.size() < 4 + n) return std::nullopt;
  std::string payload = buffer.substr(4, n);
  buffer.erase(0, 4 + n);
  if (!payload.starts_with(magic)) throw std::runtime_error("not a dtlaunch doctor frame");
  return payload.substr(magic.size());
}

bool send_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, millis_until(deadline, 1000)) <= 0 && Clock::now() >= deadline)
        return false;
      continue;
    }
    return false;
  }
  return true;
}

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

// A node of the network test: the report that carries its agent's port, and the connection
// its plan goes out on (-1: rank 0's own agent, run in a thread).
struct TestedNode {
  std::size_t report;
  int fd;
};

// One node per node rank among those with an agent, in node rank order.
std::vector<TestedNode> tested_nodes(const std::vector<TaskReport>& reports,
                                     const std::vector<std::pair<std::size_t, std::size_t>>& agents,
                                     bool own_agent) {
  std::vector<TestedNode> nodes;
  std::set<std::uint32_t> node_ranks;
  if (own_agent && !reports.empty() && reports.front().network_port != 0) {
    nodes.push_back({0, -1});
    node_ranks.insert(reports.front().contract.node_rank);
  }
  for (const auto& [fd, report] : agents)
    if (node_ranks.insert(reports[report].contract.node_rank).second)
      nodes.push_back({report, static_cast<int>(fd)});
  std::sort(nodes.begin(), nodes.end(), [&](const TestedNode& a, const TestedNode& b) {
    return reports[a.report].contract.node_rank < reports[b.report].contract.node_rank;
  });
  return nodes;
}

// Each node's peers and its time slot per peer, within the budget.
std::vector<NetworkPlan> network_plans(const std::vector<TestedNode>& nodes,
                                       const std::vector<TaskReport>& reports,
                                       const NetworkOptions& network) {
  const auto n = static_cast<std::uint32_t>(nodes.size());
  const auto peers = plan_peers(n, network.random_peers);
  std::size_t rounds = 1;
  for (const auto& p : peers) rounds = std::max(rounds, p.size());
  const auto slot = std::chrono::duration_cast<std::chrono::milliseconds>(network.budget / rounds);
  auto address_of = [&](const TestedNode& node) {
    const TaskReport& r = reports[node.report];
    return node.fd < 0 ? r.contract.master_addr : r.local_addr;  // where its check-in came from
  };
  std::vector<NetworkPlan> plans(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    plans[i] = {i, slot, {}};
    for (std::uint32_t j : peers[i])
      plans[i].peers.push_back({j, address_of(nodes[j]), reports[nodes[j].report].network_port});
  }
  return plans;
}

// The results the nodes whose plan went out send back by `gather_end`; a node speaks for
// itself only.
std::vector<LinkResult> gather_results(const std::vector<TestedNode>& nodes,
                                       std::vector<bool> pending, Clock::time_point gather_end) {
  const auto n = static_cast<std::uint32_t>(nodes.size());
  std::vector<LinkResult> results;
  std::vector<std::string> in(n);
  std::vector<pollfd> polled;
  while (std::count(pending.begin(), pending.end(), true) > 0 && Clock::now() < gather_end) {
    polled.clear();
    for (std::uint32_t i = 0; i < n; ++i)
      polled.push_back({pending[i] ? nodes[i].fd : -1, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), millis_until(gather_end, 200)) < 0 && errno != EINTR)
      break;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!pending[i] || !(polled[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t got = ::recv(nodes[i].fd, buffer, sizeof buffer, 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        pending[i] = false;
        continue;
      }
      in[i].append(buffer, static_cast<std::size_t>(got));
      try {
        if (auto body = take_frame(in[i], kResultMagic)) {
          pending[i] = false;
          for (LinkResult& r : decode_results(*body))
            if (r.from == i) results.push_back(std::move(r));
        }
      } catch (const std::exception&) {
        pending[i] = false;
      }
    }
  }
  return results;
}

// The network test, after the check-in: every node's agent gets its plan, all test at once, and
// rank 0 gathers the results within the budget (and 2 s for them to arrive).
std::vector<Problem> test_network(std::vector<NetworkLink>& links, std::string& summary,
                                  const std::vector<TaskReport>& reports,
                                  const std::vector<std::pair<std::size_t, std::size_t>>& agents,
                                  const NetworkOptions& network, const NetworkAgent* own_agent) {
  const std::vector<TestedNode> nodes = tested_nodes(reports, agents, own_agent != nullptr);
  if (nodes.size() < 2) return {};
  const auto n = static_cast<std::uint32_t>(nodes.size());
  const std::vector<NetworkPlan> plans = network_plans(nodes, reports, network);
  const auto start = Clock::now();
  const auto end = start + network.budget;
  std::vector<bool> pending(n, false);
  for (std::uint32_t i = 0; i < n; ++i)
    if (nodes[i].fd >= 0)
      pending[i] = send_all(nodes[i].fd, frame(kPlanMagic, encode_plan(plans[i])),
                            start + std::chrono::seconds(1));
  std::vector<LinkResult> own_results;
  std::thread own;
  for (std::uint32_t i = 0; i < n; ++i)
    if (nodes[i].fd < 0) own = std::thread([&, i] { own_results = own_agent->run(plans[i], end); });
  std::vector<LinkResult> results =
      gather_results(nodes, std::move(pending), end + std::chrono::seconds(2));
  if (own.joinable()) own.join();
  results.insert(results.end(), own_results.begin(), own_results.end());
  std::vector<std::string> hosts;
  std::vector<std::uint32_t> ranks;
  for (const TestedNode& node : nodes) {
    hosts.push_back(reports[node.report].host);
    ranks.push_back(reports[node.report].contract.rank);
  }
  for (const LinkResult& r : results)
    links.push_back(
        {hosts[r.from], hosts[r.to], r.rtt_us, r.up_bytes_per_s, r.down_bytes_per_s, r.error});
  summary = summarize_network(results, n);
  return judge_network(results, hosts, ranks);
}

}  // namespace

namespace {

// Rank 0's check-in: every task's reports over one epoll set for the listener and every client
// (poll() rebuilt and scanned every client on every wake-up: quadratic at 100k tasks). A client
// keeps its slot until it is dropped, so epoll's data is the slot; freed slots are reused.
class CheckIn {
 public:
  CheckIn(const Expectation& expected, std::vector<TaskReport> own, Fd listener)
      : limits_(serve_limits(expected)),
        world_(expected.world_size),
        listener_(std::move(listener)),
        reports_(std::move(own)),
        seen_(expected.world_size, false) {
    for (const TaskReport& r : reports_) count(r);
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
  void answer(const Verdict& verdict) {
    listener_.reset();
    const std::string status = "status=" + std::to_string(verdict.ok() ? 0 : 3) + "\n";
    const HeartbeatRing ring(verdict.reports, world_);
    const auto send_deadline = Clock::now() + std::chrono::seconds(2);
    for (Client& c : clients_)
      if (c.fd.get() >= 0)
        send_all(c.fd.get(), frame(kVerdictMagic, status + ring.lines(c.ranks)), send_deadline);
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
    std::vector<std::uint32_t> ranks;                // of its reports (--watch's ring)
  };

  // --watch: each task gets the heartbeat endpoints of the next kHeartbeatWindow ranks after
  // each of its own, and nothing else (O(1) per task).
  class HeartbeatRing {
   public:
    HeartbeatRing(const std::vector<TaskReport>& reports, std::uint32_t world)
        : world_(world), endpoint_of_(world, nullptr) {
      for (const TaskReport& r : reports)
        if (!r.heartbeat.empty() && r.contract.rank < world)
          endpoint_of_[r.contract.rank] = &r.heartbeat;
    }
    std::string lines(const std::vector<std::uint32_t>& ranks) const {
      std::string lines;
      for (const std::uint32_t mine : ranks)
        for (std::uint32_t i = 1; i <= std::min(kHeartbeatWindow, world_ - 1); ++i) {
          const std::uint32_t r = (mine + i) % world_;
          if (endpoint_of_[r]) lines += "ring." + std::to_string(r) + "=" + *endpoint_of_[r] + "\n";
        }
      return lines;
    }

   private:
    std::uint32_t world_;
    std::vector<const std::string*> endpoint_of_;
  };

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
      TaskReport r = decode(*body);
      r.received_unix_ms = unix_ms();
      count(r);
      if (r.network_port != 0) c.network_report = reports_.size();
      if (!r.heartbeat.empty()) c.ranks.push_back(r.contract.rank);
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

Verdict serve(const Expectation& expected, std::vector<TaskReport> own, std::uint16_t port,
              Clock::time_point deadline, const NetworkOptions& network,
              const NetworkAgent* own_agent) {
  // Rank 0's own reports arrive now, on rank 0's clock: the time they were probed is not
  // when they were sent (probing takes seconds on a loaded node, which read as clock skew).
  const std::int64_t now_ms = unix_ms();
  for (TaskReport& r : own) r.sent_unix_ms = r.received_unix_ms = now_ms;
  int error = 0;
  Fd listener = listen_on(port, error);
  if (listener.get() < 0) {
    const TaskReport& r0 = own.front();
    Verdict verdict;
    verdict.reports = std::move(own);
    verdict.problems.push_back(listen_problem(port, r0.host, error));
    return verdict;
  }
  CheckIn check_in(expected, std::move(own), std::move(listener));
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
  Verdict verdict = diagnose(expected, std::move(reports), std::move(found));
  verdict.network = std::move(links);
  verdict.network_summary = std::move(summary);
  check_in.answer(verdict);
  return verdict;
}

namespace {

// "ring.RANK=ADDRESS PORT HOST" lines after the verdict's status (--watch).
void read_ring(const std::string& body, std::map<std::uint32_t, std::string>& ring) {
  std::size_t at = 0;
  while ((at = body.find("\nring.", at)) != std::string::npos) {
    const std::size_t eq = body.find('=', at);
    const std::size_t end = body.find('\n', at + 1);
    if (eq == std::string::npos || end == std::string::npos || eq > end) break;
    ring[static_cast<std::uint32_t>(std::stoul(body.substr(at + 6, eq - at - 6)))] =
        body.substr(eq + 1, end - eq - 1);
    at = end;
  }
}

// One task's side of the exchange, on one address of rank 0.
class Reporter {
 public:
  Reporter(const std::string& where, std::uint32_t rank, const NetworkAgent* agent,
           std::map<std::uint32_t, std::string>* ring)
      : where_(where), rank_(rank), agent_(agent), ring_(ring) {}

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
      r.local_addr = local_addr;
      r.sent_unix_ms = unix_ms();
      out += frame(kReportMagic, encode(r));
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
          if (ring_) read_ring(*body, *ring_);
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
      const NetworkPlan plan = decode_plan(*body);
      const Clock::time_point end =
          Clock::now() + plan.slot * static_cast<std::int64_t>(plan.peers.size());
      send_all(fd, frame(kResultMagic, encode_results(agent_->run(plan, end))),
               end + std::chrono::seconds(2));
      answer_deadline = std::max(answer_deadline, end + std::chrono::seconds(5));
    }
    return true;
  }

  std::string where_;
  std::uint32_t rank_;
  const NetworkAgent* agent_;
  std::map<std::uint32_t, std::string>* ring_;
};

}  // namespace

int report_to_rank0(const std::string& addr, std::uint16_t port, std::vector<TaskReport> mine,
                    Clock::time_point deadline, const NetworkAgent* agent,
                    Clock::duration network_budget, std::map<std::uint32_t, std::string>* ring) {
  const std::string where = addr + ":" + std::to_string(port);
  const Reporter reporter(where, mine.front().contract.rank, agent, ring);
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
  throw reporter.failure(" on " + mine.front().host + " cannot reach rank 0 at " + where + ": " +
                         last_failure);
}

}  // namespace dtlaunch::doctor

namespace dtlaunch::doctor {

std::string report_frames(const std::vector<TaskReport>& reports) {
  std::string out;
  for (const TaskReport& r : reports) out += frame(kReportMagic, encode(r));
  return out;
}

std::optional<int> take_verdict(std::string& buffer) {
  auto body = take_frame(buffer, kVerdictMagic);
  if (!body) return std::nullopt;
  return body->find("status=0") == 0 ? 0 : 3;
}

}  // namespace dtlaunch::doctor
