#include "heartbeat/node.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "heartbeat/wire.hpp"

namespace dtlaunch::heartbeat {

std::string format_endpoint(const Endpoint& e) {
  return e.address + " " + std::to_string(e.port) + " " + e.host;
}

Endpoint parse_endpoint(const std::string& text) {
  std::istringstream in(text);
  Endpoint e;
  long port = -1;
  if (!(in >> e.address >> port >> e.host) || port <= 0 || port > 65535)
    throw std::invalid_argument("not a heartbeat endpoint: '" + text.substr(0, 80) + "'");
  e.port = static_cast<uint16_t>(port);
  return e;
}

Listener::Listener() {
  fd_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  bool v6 = fd_ >= 0;
  if (v6) {
    int off = 0;  // dual stack: IPv4 peers too
    ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      v6 = false;
    }
  }
  if (!v6) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::system_error(errno, std::generic_category(), "heartbeat: bind");
  }
  if (::listen(fd_, 64) != 0)
    throw std::system_error(errno, std::generic_category(), "heartbeat: listen");
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(a).sin6_port
                                        : reinterpret_cast<sockaddr_in&>(a).sin_port);
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}
Listener::Listener(Listener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}
int Listener::release() noexcept {
  return std::exchange(fd_, -1);
}

std::string local_address_towards(const std::string& peer) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &found) != 0) return "";
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  // A UDP connect() sends nothing: it only picks the route and so the source address.
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string out;
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  char text[NI_MAXHOST] = {};
  if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
      ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, text, sizeof text, nullptr, 0,
                    NI_NUMERICHOST) == 0)
    out = text;
  ::close(fd);
  return out;
}

namespace {

struct Link {
  int fd = -1;
  int rank = -1;  // -1 until its hello
  bool outgoing = false;
  bool connecting = false;
  TimePoint connect_deadline{};
  std::vector<uint8_t> in;
};

// A non-blocking connect() to `e`; -1 with errno set when it failed at once.
int start_connect(const Endpoint& e, int& immediate_errno) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(e.port);
  if (::getaddrinfo(e.address.c_str(), port.c_str(), &hints, &found) != 0) {
    immediate_errno = EHOSTUNREACH;
    return -1;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    immediate_errno = errno;
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno != EINPROGRESS) {
    immediate_errno = errno;
    ::close(fd);
    return -1;
  }
  immediate_errno = 0;
  return fd;
}

Probe probe_of(int err) {
  return err == 0 ? Probe::kAccepted : err == ECONNREFUSED ? Probe::kRefused : Probe::kTimedOut;
}

// Sends a whole frame or nothing useful: a peer that does not read (frozen) fills the buffer,
// and then a heartbeat is worthless anyway. Returns false when the link must be dropped.
bool send_frame(int fd, const Frame& f) {
  const ssize_t n = ::send(fd, f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(f.size())) return true;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  return false;  // an error, or a partial frame that would desynchronise the stream
}

}  // namespace

Node::Node(NodeOptions options, Listener listener)
    : options_(std::move(options)), listen_fd_(listener.release()) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::system_error(errno, std::generic_category(), "heartbeat: pipe");
  wake_read_ = p[0];
  wake_write_ = p[1];
  thread_ = std::thread([this] { run(); });
}

Node::~Node() {
  stop(true);
  ::close(wake_read_);
  ::close(wake_write_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Node::stop(bool say_goodbye) {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  goodbye_ = say_goodbye;
  const char c = 0;
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &c, 1);
  if (thread_.joinable()) thread_.join();
}

std::vector<Verdict> Node::verdicts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return verdicts_;
}

void Node::run() {
  const Settings& settings = options_.settings;
  Ring ring(options_.self, options_.world, settings, Clock::now());
  std::vector<Link> links;
  struct ProbeState {
    int fd = -1, rank = -1;
    TimePoint deadline{};
  } probe;
  TimePoint next_beat = Clock::now();

  auto close_link = [&](size_t i) {
    ::close(links[i].fd);
    links.erase(links.begin() + static_cast<std::ptrdiff_t>(i));
  };
  auto send_to = [&](int rank, const Frame& f) {
    for (size_t i = 0; i < links.size(); ++i) {
      if (links[i].rank != rank || links[i].connecting) continue;
      if (send_frame(links[i].fd, f)) sent_.fetch_add(1, std::memory_order_relaxed);
      return;  // one link per rank is enough
    }
  };
  auto hello = [&] {
    Message m;
    m.type = FrameType::kHello;
    m.rank = options_.self;
    m.tag = options_.tag;
    if (options_.position) m.position = options_.position();
    return encode(m);
  };

  auto follow_watch = [&](TimePoint now) {
    // Connect to a newly watched rank; drop the link to the one watched before.
    if (!ring.take_watch_changed()) return;
    const int w = ring.watched();
    for (size_t i = links.size(); i-- > 0;)
      if (links[i].outgoing && links[i].rank != w) close_link(i);
    if (w < 0) return;
    const auto e = options_.endpoints.find(w);
    if (e == options_.endpoints.end()) return;
    int err = 0;
    const int fd = start_connect(e->second, err);
    if (fd < 0)
      ring.connect_failed(w, probe_of(err), now);
    else
      links.push_back({fd, w, true, true, now + settings.timeout, {}});
  };
  auto spread_news = [&] {
    bool any = false;
    for (const Verdict& v : ring.take_news()) {
      any = true;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        verdicts_.push_back(v);
      }
      lost_.store(true, std::memory_order_release);
      if (options_.on_verdict) options_.on_verdict(v);
      for (size_t i = links.size(); i-- > 0;)
        if (links[i].rank == v.rank) close_link(i);
      Message m;
      m.type = FrameType::kVerdict;
      m.rank = v.rank;
      m.position = v.last;
      m.verdict = v;
      const Frame f = encode(m);
      for (const int n : ring.neighbours()) send_to(n, f);
    }
    return any;
  };

  for (;;) {
    const TimePoint now = Clock::now();
    // A rank whose endpoint this one does not know cannot be watched from here: it counts as
    // heard (the rank before it, further back on the ring, still watches it... or nobody does;
    // docs/ddp.md says how far ahead the endpoints reach).
    if (const int w = ring.watched(); w >= 0 && !options_.endpoints.count(w)) ring.heard(w, now);
    ring.tick(now);
    // A verdict changes the watched rank, whose connection may fail at once: a new verdict.
    do follow_watch(now);
    while (spread_news());
    if (const auto p = ring.probe_due(now)) {
      if (probe.fd >= 0) ::close(probe.fd);
      probe = {};
      const auto e = options_.endpoints.find(*p);
      if (e != options_.endpoints.end()) {
        int err = 0;
        const int fd = start_connect(e->second, err);
        if (fd < 0)
          ring.probed(*p, probe_of(err), now);
        else
          probe = {fd, *p, now + settings.probe_lead()};
      }
    }
    if (stopping_.load()) break;
    if (now >= next_beat) {
      Message m;
      m.type = FrameType::kBeat;
      m.rank = options_.self;
      if (options_.position) m.position = options_.position();
      const Frame f = encode(m);
      for (const int n : ring.neighbours()) send_to(n, f);
      next_beat = now + settings.interval;
    }

    // Wait for the next thing to do.
    TimePoint until = std::min(next_beat, ring.next_deadline());
    if (probe.fd >= 0) until = std::min(until, probe.deadline);
    for (const Link& l : links)
      if (l.connecting) until = std::min(until, l.connect_deadline);
    std::vector<pollfd> fds;
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({probe.fd, POLLOUT, 0});
    for (const Link& l : links)
      fds.push_back({l.fd, static_cast<short>(l.connecting ? POLLOUT : POLLIN), 0});
    const auto wait = std::chrono::duration_cast<milliseconds>(until - Clock::now()).count();
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(wait + 1, 0, 1000)));
    if (n < 0 && errno != EINTR) break;
    const TimePoint t = Clock::now();
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        links.push_back({fd, -1, false, false, {}, {}});
      }
    }
    if (probe.fd >= 0) {
      int err = -1;
      if (fds[2].revents) {
        socklen_t len = sizeof err;
        if (::getsockopt(probe.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      } else if (t >= probe.deadline) {
        err = ETIMEDOUT;
      }
      if (err >= 0) {
        ::close(probe.fd);
        ring.probed(probe.rank, probe_of(err), t);
        probe = {};
      }
    }
    // Links: the pollfds from index 3 match links as they were before accept() added any.
    const size_t polled = fds.size() - 3;
    std::vector<size_t> dead;
    for (size_t i = 0; i < polled; ++i) {
      Link& l = links[i];
      const short ev = fds[3 + i].revents;
      if (l.connecting) {
        int err = -1;
        if (ev) {
          socklen_t len = sizeof err;
          if (::getsockopt(l.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        } else if (t >= l.connect_deadline) {
          err = ETIMEDOUT;
        }
        if (err == 0) {
          l.connecting = false;
          if (!send_frame(l.fd, hello())) dead.push_back(i);
          // The rank we connected to counts as heard: it accepted.
          ring.heard(l.rank, t);
        } else if (err > 0) {
          ring.connect_failed(l.rank, probe_of(err), t);
          dead.push_back(i);
        }
        continue;
      }
      if (!ev) continue;
      uint8_t buf[4096];
      const ssize_t got = ::recv(l.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        if (l.rank >= 0) ring.closed(l.rank, t);
        dead.push_back(i);
        continue;
      }
      if (got < 0) continue;
      l.in.insert(l.in.end(), buf, buf + got);
      size_t at = 0;
      bool bad = false;
      for (; l.in.size() - at >= kFrameBytes; at += kFrameBytes) {
        Frame f;
        std::copy_n(l.in.begin() + static_cast<std::ptrdiff_t>(at), kFrameBytes, f.begin());
        const auto m = decode(f);
        if (!m || m->rank < 0 || m->rank >= options_.world) {
          bad = true;
          break;
        }
        switch (m->type) {
          case FrameType::kHello:
            if (m->tag != options_.tag) {
              bad = true;
              break;
            }
            if (l.rank < 0) {
              l.rank = m->rank;
              // Answered, so that the rank that connected learns this one's position at once.
              if (!l.outgoing && !send_frame(l.fd, hello())) bad = true;
            }
            ring.heard(m->rank, t, m->position);
            break;
          case FrameType::kBeat:
            if (l.rank >= 0) ring.heard(l.rank, t, m->position);
            break;
          case FrameType::kVerdict:
            if (l.rank >= 0) ring.heard(l.rank, t);
            ring.receive(m->verdict, t);
            break;
          case FrameType::kBye:
            if (l.rank >= 0) ring.departed(l.rank, t);
            l.rank = -1;  // its EOF that follows is no loss
            break;
        }
        if (bad) break;
      }
      l.in.erase(l.in.begin(), l.in.begin() + static_cast<std::ptrdiff_t>(at));
      if (bad) dead.push_back(i);
    }
    for (size_t k = dead.size(); k-- > 0;) close_link(dead[k]);
  }

  if (goodbye_.load()) {
    Message m;
    m.type = FrameType::kBye;
    m.rank = options_.self;
    const Frame f = encode(m);
    for (const Link& l : links)
      if (!l.connecting) send_frame(l.fd, f);
  }
  for (const Link& l : links) ::close(l.fd);
  if (probe.fd >= 0) ::close(probe.fd);
}

}  // namespace dtlaunch::heartbeat
