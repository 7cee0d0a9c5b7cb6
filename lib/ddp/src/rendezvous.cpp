// Rendezvous through c10d::TCPStore with a deadline and a diagnosis. TCPStore's own
// waitWorkers gives up silently and a later Gloo connect then fails with "Socket Timeout", at
// about twice the timeout (see docs/ddp.md). So the store is opened without waiting and the ranks
// check in through keys that say, at the deadline, exactly who is missing.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>

#include "core/error.hpp"
#include "internal.hpp"

namespace dtlaunch::ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kCountKey = "dtlaunch/rdzv/count";
const std::string kFailedKey = "dtlaunch/rdzv/failed";
const std::string kAckKey = "dtlaunch/rdzv/failed_seen";
std::string rank_key(int rank) {
  return "dtlaunch/rdzv/rank/" + std::to_string(rank);
}

std::string seconds_text(std::chrono::milliseconds ms) {
  auto s = std::to_string(static_cast<double>(ms.count()) / 1000.0);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s + "s";
}

std::string address(const WorkerEnv& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
}

// One line: the first line of a c10 error message, without its C++ stack trace.
std::string first_line(const std::exception& e) {
  std::string what = e.what();
  auto nl = what.find('\n');
  return nl == std::string::npos ? what : what.substr(0, nl);
}

// One non-blocking connect to `a`, waiting at most a second (and not past the deadline).
// Returns 0 once accepted (the socket is closed at once), else the errno that says why not.
int try_connect(const addrinfo& a, Clock::time_point deadline) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) return errno;
  int err = ::connect(fd, a.ai_addr, a.ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof err;
    if (::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 1, 1000))) != 1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = ETIMEDOUT;
  }
  ::close(fd);
  return err;
}

// Waits until something accepts TCP connections at env's MASTER_ADDR:MASTER_PORT, trying every
// 5-100 ms, up to the deadline. TCPStore's client spends its whole timeout on a first connect
// attempt and then backs off for seconds (LibTorch 2.6 reported a missing rank 0 2.5 times past
// a 2 s timeout; 1.13 retries once a second), so a rank that starts before rank 0 listens would
// arrive late and one whose rank 0 never comes would report well after the deadline. Returns ""
// once a connection was accepted, else why the last attempt failed. A name that the resolver
// says does not exist is an error at once: waiting would not fix a typo.
std::string wait_for_listener(const WorkerEnv& env, Clock::time_point deadline) {
  const std::string port = std::to_string(env.master_port);
  std::string reason = "no attempt was made";
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found);
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
    if (rc == EAI_NONAME || rc == EAI_FAIL)
      throw Error(ExitCode::kBadInput, "dtlaunch ddp: rank " + std::to_string(env.rank) +
                                           " cannot resolve MASTER_ADDR '" + env.master_addr +
                                           "': " + ::gai_strerror(rc));
    if (rc != 0)
      reason = "cannot resolve MASTER_ADDR '" + env.master_addr + "': " + ::gai_strerror(rc);
    for (const addrinfo* a = rc == 0 ? found : nullptr; a; a = a->ai_next) {
      const int err = try_connect(*a, deadline);
      if (err == 0) return "";
      reason = "connect: " + std::string(std::strerror(err));
    }
    const auto now = Clock::now();
    if (now >= deadline) return reason;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

// LibTorch 2.4+ has TCPStoreOptions::useLibUV (true by default); 1.13 has no such member.
template <class Options, class = void>
struct HasUseLibUV : std::false_type {};
template <class Options>
struct HasUseLibUV<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>>
    : std::true_type {};

// Opens the store on the server env asks for. A LibTorch built without libuv (Debian's 2.x)
// refuses useLibUV with "use_libuv was requested but PyTorch was build without libuv support",
// even though its default asks for it: then the older server, which is all 1.13 ever had.
template <class Options>
c10::intrusive_ptr<c10d::Store> open_store(const WorkerEnv& env, Options options) {
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

std::string format_ranks(const std::vector<int>& ranks, size_t limit) {
  std::string out;
  size_t ranges = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (ranges == limit) {
      out += ", ... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    if (ranges) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

c10::intrusive_ptr<c10d::Store> rendezvous(const WorkerEnv& env,
                                           std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.waitWorkers = false;
  so.timeout = timeout;

  auto unreachable = [&](const std::string& reason) {
    return Error(ExitCode::kFailure,
                 "dtlaunch ddp: rendezvous at " + address(env) + " failed: rank " +
                     std::to_string(env.rank) +
                     " could not reach the store that rank 0 hosts within " +
                     seconds_text(timeout) +
                     " (is rank 0 running? are MASTER_ADDR/MASTER_PORT right?): " + reason);
  };
  if (env.rank != 0)
    if (std::string reason = wait_for_listener(env, deadline); !reason.empty())
      throw unreachable(reason);

  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = open_store(env, so);
  } catch (const std::exception& e) {
    if (env.rank == 0)
      throw Error(ExitCode::kFailure,
                  "dtlaunch ddp: rank 0 could not host the rendezvous store at " + address(env) +
                      ": " + first_line(e));
    throw unreachable(first_line(e));
  }

  const std::string where = "dtlaunch ddp: rendezvous at " + address(env);
  int64_t arrived = 0;
  try {
    store->set(rank_key(env.rank), std::vector<uint8_t>{1});
    store->add(kCountKey, 1);
    // Polling an add(0) rather than a blocking wait(): a TCPStore wait that times out leaves its
    // reply pending on the socket, and the diagnosis below needs the socket afterwards.
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      arrived = store->add(kCountKey, 0);
      if (arrived >= env.world_size) break;
      // Rank 0 publishes its diagnosis before it gives up, and with it goes the store: so the
      // other ranks report the same thing instead of a broken pipe.
      if (env.rank != 0 && store->check({kFailedKey})) {
        auto text = store->get(kFailedKey);
        store->add(kAckKey, 1);
        throw Error(ExitCode::kFailure, std::string(text.begin(), text.end()));
      }
      if (Clock::now() >= deadline) {
        std::vector<int> missing;
        for (int r = 0; r < env.world_size; ++r)
          if (!store->check({rank_key(r)})) missing.push_back(r);
        const std::string msg = where + " timed out after " + seconds_text(timeout) + ": " +
                                std::to_string(arrived) + " of " + std::to_string(env.world_size) +
                                " ranks arrived; missing ranks: " + format_ranks(missing);
        if (env.rank == 0) {
          store->set(kFailedKey, std::vector<uint8_t>(msg.begin(), msg.end()));
          // Keeps the store up, briefly, until the ranks that came have read it.
          const auto linger_end = Clock::now() + std::chrono::seconds(2);
          while (store->add(kAckKey, 0) < arrived - 1 && Clock::now() < linger_end)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        } else {
          store->add(kAckKey, 1);
        }
        throw Error(ExitCode::kFailure, msg);
      }
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
          pause, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()) +
                     std::chrono::milliseconds(1)));
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ExitCode::kFailure, where + " failed on rank " + std::to_string(env.rank) +
                                        " after " + std::to_string(arrived) + " of " +
                                        std::to_string(env.world_size) +
                                        " ranks had arrived: lost the store that rank 0 hosts "
                                        "(rank 0 gave up or died): " +
                                        first_line(e));
  }
  return store;
}

}  // namespace dtlaunch::ddp::detail
