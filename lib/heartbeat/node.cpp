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

#include "core/fd.hpp"
#include "core/socket.hpp"
#include "heartbeat/gate.hpp"
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

namespace {

// A listening socket bound to numeric `address`; -1 when it cannot be.
int listen_on(const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), "0", &hints, &found) != 0) return -1;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

}  // namespace

Listener::Listener(const std::string& address) {
  if (!address.empty()) fd_ = listen_on(address);
  if (fd_ < 0) bind_any();
  if (::listen(fd_, 64) != 0)
    throw std::system_error(errno, std::generic_category(), "heartbeat: listen");
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(a).sin6_port
                                        : reinterpret_cast<sockaddr_in&>(a).sin_port);
}

void Listener::bind_any() {
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

// A connection to or from another rank: the watched rank's (outgoing), or a watcher's.
struct Link {
  core::UniqueFd fd;
  int rank = -1;  // -1 until its hello
  bool outgoing = false;
  bool connecting = false;
  TimePoint deadline{};  // connecting: the connect()'s; accepted: the hello's
  std::vector<uint8_t> in;
  LinkGate gate;
};

// The one probe under way: a connect() whose only answer is whether `rank` accepts it.
struct PendingProbe {
  core::UniqueFd fd;
  int rank = -1;
  TimePoint deadline{};
};

// A non-blocking connect() to `e` (with TCP_NODELAY): the descriptor, connected or connecting,
// or -errno when it failed at once (-EHOSTUNREACH for an address that does not resolve).
int start_connect(const Endpoint& e) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(e.port);
  if (::getaddrinfo(e.address.c_str(), port.c_str(), &hints, &found) != 0) return -EHOSTUNREACH;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  const int fd = core::start_connect(*found);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// How a non-blocking connect() on `fd` ended: 0 (connected) or an errno once poll() reported it
// or the deadline passed; -1 while it is still under way.
int connect_result(int fd, short revents, TimePoint now, TimePoint deadline) {
  if (revents) return core::connect_error(fd);
  return now >= deadline ? ETIMEDOUT : -1;
}

// A reset is a refusal too: a connection still in the backlog of a listener that closes is reset.
Probe probe_of(int err) {
  if (err == 0) return Probe::kAccepted;
  return err == ECONNREFUSED || err == ECONNRESET ? Probe::kRefused : Probe::kTimedOut;
}

// Sends a whole frame or nothing useful: a peer that does not read (frozen) fills the buffer,
// and then a heartbeat is worthless anyway. Returns false when the link must be dropped.
bool send_frame(int fd, const Frame& f) {
  const ssize_t n = ::send(fd, f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(f.size())) return true;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  return false;  // an error, or a partial frame that would desynchronise the stream
}

Message verdict_message(const Verdict& v) {
  Message m;
  m.type = FrameType::kVerdict;
  m.rank = v.rank;
  m.position = v.last;
  m.verdict = v;
  return m;
}

Message hello_message(const NodeOptions& o) {
  Message m;
  m.type = FrameType::kHello;
  m.rank = o.self;
  m.tag = o.tag;
  if (o.position) m.position = o.position();
  return m;
}

// How long a connection that a stranger may have opened has to say a valid hello: a rank says it
// as soon as its connect() completes, but a rank starved of CPU must not have its link closed
// (it would read that as this rank's exit), hence half the timeout, 2 to 5 s.
milliseconds hello_window(const Settings& s) {
  return std::clamp<milliseconds>(s.timeout / 2, milliseconds(2000), milliseconds(5000));
}

// Closes each accepted connection that has not said a valid hello in time: a stranger's, or
// one that trickles its frames.
void close_unidentified(std::vector<Link>& links, Gate& gate, TimePoint t) {
  std::erase_if(links, [&](const Link& l) {
    const bool expired = !l.outgoing && !l.gate.greeted && t >= l.deadline;
    if (expired) gate.count(Refusal::kNoHello);
    return expired;
  });
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

void Node::wake() {
  const char c = 0;
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &c, 1);
}

void Node::stop(bool say_goodbye) {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  goodbye_ = say_goodbye;
  wake();
  if (thread_.joinable()) thread_.join();
}

std::vector<Verdict> Node::verdicts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return verdicts_;
}

void Node::add_endpoints(const std::map<int, Endpoint>& more) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [rank, e] : more) new_endpoints_[rank] = e;
  }
  wake();
}

Refused Node::refused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return refused_;
}

std::vector<int> Node::own_sockets() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return own_sockets_;
}

// The heartbeat thread: its links, its probe and the pure core, and one step per kind of event.
class Node::Loop {
 public:
  explicit Loop(Node& node)
      : node_(node),
        o_(node.options_),
        ring_(o_.self, o_.world, o_.settings, Clock::now()),
        gate_(o_.self, o_.world, o_.tag, o_.key),
        next_beat_(Clock::now()) {}
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  void run() {
    for (;;) {
      const TimePoint now = Clock::now();
      take_endpoints();
      // A rank whose endpoint this one does not know (yet) cannot be watched from here: it counts
      // as heard (the rank before it, further back on the ring, still watches it... or nobody
      // does; docs/ddp.md says how far ahead the endpoints reach).
      if (const int w = ring_.watched(); w >= 0 && !o_.endpoints.count(w)) ring_.heard(w, now);
      ring_.tick(now);
      // A verdict changes the watched rank, whose connection may fail at once: a new verdict, or
      // (after a goodbye) a departure and another successor to follow.
      do follow_watch(now);
      while (spread_news() || connect_pending_);
      start_probe(now);
      if (node_.stopping_.load()) break;
      beat(now);
      if (!wait_and_handle()) break;
    }
    if (node_.goodbye_.load()) {
      // A watcher that switched to this rank a moment ago waits in the backlog: it hears the
      // goodbye too, instead of the reset that closing the listener sends it.
      // Its hello is read first: a goodbye is sealed to a known rank.
      accept_all();
      for (Link& l : links_)
        if (!l.connecting && !l.gate.greeted) read_link(l, Clock::now());
      Message m;
      m.type = FrameType::kBye;
      m.rank = o_.self;
      for (Link& l : links_)
        if (!l.connecting && l.gate.rank >= 0) send_message(l, m);
    }
  }

 private:
  void close_link(size_t i) { links_.erase(links_.begin() + static_cast<std::ptrdiff_t>(i)); }
  // Sealed for the link's peer, which is known: this rank opened the link, or the peer said hello.
  bool send_message(Link& l, const Message& m) {
    return send_frame(l.fd.get(), gate_.seal(m, l.gate.rank, l.outgoing));
  }
  void send_to(int rank, const Message& m) {
    for (Link& l : links_) {
      if (l.rank != rank || l.connecting) continue;
      if (send_message(l, m)) node_.sent_.fetch_add(1, std::memory_order_relaxed);
      return;  // one link per rank is enough
    }
  }

  // Endpoints from add_endpoints(); the watched rank's, when it is among them, is connected to.
  void take_endpoints() {
    std::map<int, Endpoint> more;
    {
      std::lock_guard<std::mutex> lock(node_.mutex_);
      more.swap(node_.new_endpoints_);
    }
    for (auto& [rank, e] : more) {
      const bool unknown = !o_.endpoints.count(rank);
      o_.endpoints[rank] = std::move(e);
      if (unknown && rank == ring_.watched()) connect_pending_ = true;
    }
  }

  // Connects to a newly watched rank (or one whose endpoint just arrived); drops the link to
  // the one watched before.
  void follow_watch(TimePoint now) {
    const bool changed = ring_.take_watch_changed();
    if (!changed && !connect_pending_) return;
    connect_pending_ = false;
    const int w = ring_.watched();
    for (size_t i = links_.size(); i-- > 0;)
      if (links_[i].outgoing && links_[i].rank != w) close_link(i);
    if (w < 0) return;
    const auto e = o_.endpoints.find(w);
    if (e == o_.endpoints.end()) return;
    const int fd = start_connect(e->second);
    if (fd < 0) {
      ring_.connect_failed(w, probe_of(-fd), now);
      connect_pending_ = ring_.watched() != w;
    } else {
      links_.push_back(
          {core::UniqueFd(fd), w, true, true, now + o_.settings.timeout, {}, {false, w, false}});
    }
  }

  void note_own_sockets() {
    std::vector<int> fds{node_.listen_fd_, node_.wake_read_, node_.wake_write_};
    if (probe_.fd) fds.push_back(probe_.fd.get());
    for (const Link& l : links_) fds.push_back(l.fd.get());
    std::lock_guard<std::mutex> lock(node_.mutex_);
    node_.own_sockets_ = std::move(fds);
  }

  // Hands out each new verdict and floods it to the neighbours; false when there was none.
  bool spread_news() {
    bool any = false;
    for (const Verdict& v : ring_.take_news()) {
      any = true;
      {
        std::lock_guard<std::mutex> lock(node_.mutex_);
        node_.verdicts_.push_back(v);
      }
      node_.lost_.store(true, std::memory_order_release);
      note_own_sockets();
      if (o_.on_verdict) o_.on_verdict(v);
      for (size_t i = links_.size(); i-- > 0;)
        if (links_[i].rank == v.rank) close_link(i);
      for (const int n : ring_.neighbours()) send_to(n, verdict_message(v));
    }
    return any;
  }

  // Every verdict known here, to a new neighbour: one flooded while the link to it was still
  // connecting (a new successor after a loss) would otherwise stop here.
  bool send_verdicts(Link& l) {
    for (const Verdict& v : ring_.verdicts())
      if (!send_message(l, verdict_message(v))) return false;
    return true;
  }

  void start_probe(TimePoint now) {
    const auto p = ring_.probe_due(now);
    if (!p) return;
    probe_ = {};
    const auto e = o_.endpoints.find(*p);
    if (e == o_.endpoints.end()) return;
    const int fd = start_connect(e->second);
    if (fd < 0)
      ring_.probed(*p, probe_of(-fd), now);
    else
      probe_ = {core::UniqueFd(fd), *p, now + o_.settings.probe_lead()};
  }

  void beat(TimePoint now) {
    if (now < next_beat_) return;
    Message m;
    m.type = FrameType::kBeat;
    m.rank = o_.self;
    if (o_.position) m.position = o_.position();
    for (const int n : ring_.neighbours()) send_to(n, m);
    next_beat_ = now + o_.settings.interval;
  }

  // Waits in poll() for the next thing to do and handles what came; false when stopping.
  bool wait_and_handle() {
    TimePoint until = std::min(next_beat_, ring_.next_deadline());
    if (probe_.fd) until = std::min(until, probe_.deadline);
    for (const Link& l : links_)
      if (l.connecting || (!l.outgoing && !l.gate.greeted)) until = std::min(until, l.deadline);
    std::vector<pollfd> fds;
    fds.push_back({node_.wake_read_, POLLIN, 0});
    fds.push_back({node_.listen_fd_, POLLIN, 0});
    fds.push_back({probe_.fd.get(), POLLOUT, 0});
    for (const Link& l : links_)
      fds.push_back({l.fd.get(), static_cast<short>(l.connecting ? POLLOUT : POLLIN), 0});
    const auto wait = std::chrono::duration_cast<milliseconds>(until - Clock::now()).count();
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(wait + 1, 0, 1000)));
    if (n < 0 && errno != EINTR) return false;
    const TimePoint t = Clock::now();
    if (fds[0].revents) {
      char drain[64];
      while (::read(node_.wake_read_, drain, sizeof drain) > 0) {
      }
      if (node_.stopping_.load()) return false;
    }
    if (fds[1].revents & POLLIN) accept_all();
    if (probe_.fd) finish_probe(fds[2].revents, t);
    // Links: the pollfds from index 3 match links as they were before accept() added any.
    const size_t polled = fds.size() - 3;
    std::vector<size_t> dead;
    for (size_t i = 0; i < polled; ++i) {
      Link& l = links_[i];
      const short ev = fds[3 + i].revents;
      const bool keep = l.connecting ? finish_connect(l, ev, t) : !ev || read_link(l, t);
      if (!keep) dead.push_back(i);
    }
    for (size_t k = dead.size(); k-- > 0;) close_link(dead[k]);
    close_unidentified(links_, gate_, t);
    publish_refused();
    return true;
  }

  void publish_refused() {
    if (gate_.refused().total() == published_refused_) return;
    published_refused_ = gate_.refused().total();
    std::lock_guard<std::mutex> lock(node_.mutex_);
    node_.refused_ = gate_.refused();
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(node_.listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const TimePoint hello_by = Clock::now() + hello_window(o_.settings);
      links_.push_back({core::UniqueFd(fd), -1, false, false, hello_by, {}, {true, -1, false}});
    }
  }

  void finish_probe(short revents, TimePoint t) {
    const int err = connect_result(probe_.fd.get(), revents, t, probe_.deadline);
    if (err < 0) return;
    ring_.probed(probe_.rank, probe_of(err), t);
    probe_ = {};
  }

  // A connect() in progress; false when the link must be dropped.
  bool finish_connect(Link& l, short revents, TimePoint t) {
    const int err = connect_result(l.fd.get(), revents, t, l.deadline);
    if (err == 0) {
      l.connecting = false;
      // The rank we connected to counts as heard: it accepted.
      ring_.heard(l.rank, t);
      return send_message(l, hello_message(o_)) && send_verdicts(l);
    }
    if (err > 0) {
      ring_.connect_failed(l.rank, probe_of(err), t);
      return false;
    }
    return true;
  }

  // Reads what arrived on a link; false when the link must be dropped.
  bool read_link(Link& l, TimePoint t) {
    uint8_t buf[4096];
    const ssize_t got = ::recv(l.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
      if (l.rank >= 0) ring_.closed(l.rank, t);
      return false;
    }
    if (got < 0) return true;
    l.in.insert(l.in.end(), buf, buf + got);
    size_t at = 0;
    bool ok = true;
    for (; ok && l.in.size() - at >= kFrameBytes; at += kFrameBytes) {
      Frame f;
      std::copy_n(l.in.begin() + static_cast<std::ptrdiff_t>(at), kFrameBytes, f.begin());
      // A refused frame is never acted on; a connection that has not said a valid hello first
      // is a stranger's, and closed.
      const std::optional<Message> m = gate_.admit(f, l.gate);
      ok = m ? handle_frame(l, *m, t) : l.gate.greeted;
    }
    l.in.erase(l.in.begin(), l.in.begin() + static_cast<std::ptrdiff_t>(at));
    return ok;
  }

  // One frame the gate admitted; false when the link must be dropped.
  bool handle_frame(Link& l, const Message& m, TimePoint t) {
    switch (m.type) {
      case FrameType::kHello:
        if (l.rank < 0) {
          l.rank = m.rank;
          // Answered, so that the rank that connected learns this one's position at once.
          if (!l.outgoing && !(send_message(l, hello_message(o_)) && send_verdicts(l)))
            return false;
        }
        ring_.heard(m.rank, t, m.position);
        break;
      case FrameType::kBeat:
        if (l.rank >= 0) ring_.heard(l.rank, t, m.position);
        break;
      case FrameType::kVerdict:
        if (l.rank >= 0) ring_.heard(l.rank, t);
        ring_.receive(m.verdict, t);
        break;
      case FrameType::kBye:
        if (l.rank >= 0) ring_.departed(l.rank, t);
        l.rank = -1;  // its EOF that follows is no loss
        break;
    }
    return true;
  }

  Node& node_;
  NodeOptions& o_;
  Ring ring_;
  Gate gate_;
  std::vector<Link> links_;
  PendingProbe probe_;
  TimePoint next_beat_;
  bool connect_pending_ = false;
  uint64_t published_refused_ = 0;
};

void Node::run() {
  Loop(*this).run();
}

}  // namespace dtlaunch::heartbeat
