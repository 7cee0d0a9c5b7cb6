// The bounded TCPStore client (store_client.hpp). One non-blocking socket; every send and
// receive waits with poll up to the operation's deadline. Before each request the socket must
// hold nothing: a TCPStore answers only what it was asked, so a byte already there is the peer
// speaking unasked, whenever it came. After a failure (a timeout leaves a reply in flight) the
// connection is dropped and the next operation opens a new one.
#include "store_client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>
#include <utility>

#include "core/socket.hpp"
#include "core/text.hpp"
#include "internal.hpp"

namespace dtlaunch::ddp::detail {
namespace {

// The client speaks 1.13's protocol and is used only on 1.x (rendezvous.cpp): 2.x keeps c10d's
// own client, so the class is not compiled there.
#if TORCH_VERSION_MAJOR < 2
// LibTorch 1.13's query and answer codes (torch/csrc/distributed/c10d/TCPStore.cpp).
enum class Query : uint8_t {
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey
};
constexpr uint8_t kCheckReady = 0;
constexpr uint8_t kCheckNotReady = 1;
constexpr uint8_t kStopWaiting = 0;
// c10d::TCPStore's prefix for a user's keys.
const std::string kKeyPrefix = "/";

class BoundedStore final : public c10d::Store {
 public:
  BoundedStore(std::string host, int port, milliseconds timeout)
      : Store(timeout), host_(std::move(host)), port_(port) {
    std::lock_guard<std::mutex> lock(mutex_);
    connect(Clock::now() + timeout_);
  }
  ~BoundedStore() override { drop(); }
  BoundedStore(const BoundedStore&) = delete;
  BoundedStore& operator=(const BoundedStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    Request r(*this, Query::kSet, key);
    r.append_bytes(value.data(), value.size());
    r.send();
  }

  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    Request r(*this, Query::kCompareSet, key);
    r.append_bytes(expected.data(), expected.size());
    r.append_bytes(desired.data(), desired.size());
    r.send();
    return r.receive_bytes();
  }

  // As TCPStore::get: waits for the key up to the store's timeout, then reads it.
  std::vector<uint8_t> get(const std::string& key) override {
    wait({key}, timeout_);
    Request r(*this, Query::kGet, key);
    r.send();
    return r.receive_bytes();
  }

  int64_t add(const std::string& key, int64_t value) override {
    Request r(*this, Query::kAdd, key);
    r.append_value(value);
    r.send();
    return r.receive_value<int64_t>();
  }

  bool deleteKey(const std::string& key) override {
    Request r(*this, Query::kDeleteKey, key);
    r.send();
    return r.receive_value<int64_t>() == 1;
  }

  bool check(const std::vector<std::string>& keys) override {
    Request r(*this, Query::kCheck, keys);
    r.send();
    const auto answer = r.receive_value<uint8_t>();
    if (answer != kCheckReady && answer != kCheckNotReady)
      r.fail("answered a check with " + std::to_string(answer));
    return answer == kCheckReady;
  }

  int64_t getNumKeys() override {
    Request r(*this, Query::kGetNumKeys);
    r.send();
    return r.receive_value<int64_t>();
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    Request r(*this, Query::kWait, keys, timeout);
    r.send();
    const auto answer = r.receive_value<uint8_t>();
    if (answer != kStopWaiting) r.fail("answered a wait with " + std::to_string(answer));
  }

 private:
  // One query and its answer under the client's lock, within one deadline. The connection
  // survives only a request that completed: otherwise part of it, or of its answer, is in flight.
  class Request {
   public:
    Request(BoundedStore& s, Query q, milliseconds timeout)
        : store_(s), lock_(s.mutex_), deadline_(Clock::now() + timeout) {
      store_.ready_for_request(deadline_);
      append_value(static_cast<uint8_t>(q));
    }
    explicit Request(BoundedStore& s, Query q) : Request(s, q, s.reply_limit()) {}
    Request(BoundedStore& s, Query q, const std::string& key) : Request(s, q) { append_key(key); }
    Request(BoundedStore& s, Query q, const std::vector<std::string>& keys, milliseconds timeout)
        : Request(s, q, timeout) {
      append_value(static_cast<uint64_t>(keys.size()));
      for (const std::string& k : keys) append_key(k);
    }
    Request(BoundedStore& s, Query q, const std::vector<std::string>& keys)
        : Request(s, q, keys, s.reply_limit()) {}
    ~Request() {
      if (!completed_) store_.drop();
    }
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;

    template <class T>
    void append_value(T v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      out_.insert(out_.end(), p, p + sizeof v);
    }
    void append_bytes(const uint8_t* p, size_t n) {
      append_value(static_cast<uint64_t>(n));
      out_.insert(out_.end(), p, p + n);
    }
    void append_key(const std::string& key) {
      const std::string k = kKeyPrefix + key;
      append_bytes(reinterpret_cast<const uint8_t*>(k.data()), k.size());
    }
    // Sends the request; a set has no answer, so it is complete once sent.
    void send() {
      store_.send_all(out_.data(), out_.size(), deadline_);
      completed_ = true;
    }
    template <class T>
    T receive_value() {
      completed_ = false;
      T v{};
      store_.receive_all(reinterpret_cast<uint8_t*>(&v), sizeof v, deadline_);
      completed_ = true;
      return v;
    }
    std::vector<uint8_t> receive_bytes() {
      const auto n = receive_value<uint64_t>();
      if (n > kStoreMaxValueBytes)
        fail("announced a value of " + std::to_string(n) + " bytes (at most " +
             std::to_string(kStoreMaxValueBytes) + " accepted)");
      completed_ = false;
      // Grown as the bytes arrive: a length the peer does not send costs nothing.
      std::vector<uint8_t> v;
      while (v.size() < n) {
        const size_t chunk = std::min<uint64_t>(n - v.size(), 64 * 1024);
        v.resize(v.size() + chunk);
        store_.receive_all(v.data() + v.size() - chunk, chunk, deadline_);
      }
      completed_ = true;
      return v;
    }
    [[noreturn]] void fail(const std::string& what) {
      completed_ = false;
      store_.protocol_error(what);
    }

   private:
    BoundedStore& store_;
    std::lock_guard<std::mutex> lock_;
    Clock::time_point deadline_;
    std::vector<uint8_t> out_;
    bool completed_ = false;
  };

  // How long a request other than a wait waits for its answer: the store's timeout and 5 s
  // more, a backstop. A caller that bounds its own waits (the rendezvous's watchdog, which cuts
  // the connection at its deadline and then names a silent peer) must come first.
  milliseconds reply_limit() const { return timeout_ + std::chrono::seconds(5); }

  std::string where() const { return host_ + ":" + std::to_string(port_); }

  [[noreturn]] void protocol_error(const std::string& what) const {
    throw StoreProtocolError("the peer at " + where() + " " + what +
                             ": a c10d TCPStore response was expected");
  }

  void connect(Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
    if (rc != 0) throw std::runtime_error("cannot resolve " + host_ + ": " + ::gai_strerror(rc));
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
    std::string why = "no address";
    for (const addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd = core::connect_until(*a, deadline, milliseconds::max());
      if (fd < 0)
        why = std::strerror(-fd);
      else
        fd_ = fd;
    }
    if (fd_ < 0) throw std::runtime_error("cannot connect to the store at " + where() + ": " + why);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  void drop() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // A connection for the next request, holding no byte the peer sent unasked.
  void ready_for_request(Clock::time_point deadline) {
    if (fd_ < 0) connect(deadline);
    uint8_t head[16];
    const ssize_t n = ::recv(fd_, head, sizeof head, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0) {
      drop();
      throw std::runtime_error("the store at " + where() + " closed the connection");
    }
    if (n > 0) {
      drop();
      protocol_error("sent bytes it was not asked for (" + hex_bytes(std::string(head, head + n)) +
                     (n == sizeof head ? " ..." : "") + ")");
    }
  }

  void send_all(const uint8_t* p, size_t n, Clock::time_point deadline) {
    while (n > 0) {
      const ssize_t sent = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (sent > 0) {
        p += sent;
        n -= static_cast<size_t>(sent);
      } else if (errno == EAGAIN || errno == EINTR) {
        if (!poll_until(fd_, POLLOUT, deadline)) timed_out("send");
      } else {
        throw std::runtime_error("the store at " + where() + ": send: " + std::strerror(errno));
      }
    }
  }

  void receive_all(uint8_t* p, size_t n, Clock::time_point deadline) {
    while (n > 0) {
      const ssize_t got = ::recv(fd_, p, n, 0);
      if (got > 0) {
        p += got;
        n -= static_cast<size_t>(got);
      } else if (got == 0) {
        throw std::runtime_error("the store at " + where() + " closed the connection (" +
                                 "connection closed by peer)");
      } else if (errno == EAGAIN || errno == EINTR) {
        if (!poll_until(fd_, POLLIN, deadline)) timed_out("an answer");
      } else {
        throw std::runtime_error("the store at " + where() + ": recv: " + std::strerror(errno));
      }
    }
  }

  [[noreturn]] void timed_out(const std::string& what) const {
    throw std::runtime_error("the store at " + where() + ": timed out waiting for " + what);
  }

  const std::string host_;
  const int port_;
  std::mutex mutex_;
  int fd_ = -1;
};

#endif  // TORCH_VERSION_MAJOR < 2

}  // namespace

bool poll_until(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
    if (Clock::now() >= deadline) return false;
  }
}

namespace {

template <class Options, class = void>
struct HasUseLibUV : std::false_type {};
template <class Options>
struct HasUseLibUV<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>>
    : std::true_type {};

// Opens the store on the server env asks for. A LibTorch built without libuv (Debian's 2.x)
// refuses useLibUV with "use_libuv was requested but PyTorch was build without libuv support",
// even though its default asks for it: then the older server, which is all 1.13 ever had.
// On LibTorch 1.x a client is our own bounded one (store_client.hpp): 1.13's would abort the
// process on unasked bytes from the port.
template <class Options>
c10::intrusive_ptr<c10d::Store> open_store_with(const WorkerEnv& env, Options options) {
#if TORCH_VERSION_MAJOR < 2
  if (!options.isServer)
    return connect_bounded_store(env.master_addr, env.master_port, options.timeout);
#endif
  if constexpr (HasUseLibUV<Options>::value) {
    options.useLibUV = env.store_use_libuv;
    try {
      return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    } catch (const std::exception& e) {
      if (!options.useLibUV ||
          std::string_view(e.what()).find("without libuv") == std::string_view::npos)
        throw;
      options.useLibUV = false;
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

}  // namespace

c10::intrusive_ptr<c10d::Store> open_store(const WorkerEnv& env, c10d::TCPStoreOptions options) {
  return open_store_with(env, std::move(options));
}

#if TORCH_VERSION_MAJOR < 2
c10::intrusive_ptr<c10d::Store> connect_bounded_store(const std::string& host, int port,
                                                      milliseconds timeout) {
  return c10::make_intrusive<BoundedStore>(host, port, timeout);
}
#endif

}  // namespace dtlaunch::ddp::detail
