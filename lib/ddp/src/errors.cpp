// The runtime's error kinds and the text helpers its messages share.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <string_view>

#include "core/names.hpp"
#include "core/text.hpp"
#include "internal.hpp"

namespace dtlaunch::ddp {

constexpr core::Named<ErrorKind> kErrorKindNames[] = {
    {ErrorKind::kConfig, "config"},      {ErrorKind::kTimeout, "timeout"},
    {ErrorKind::kPeerLost, "peer-lost"}, {ErrorKind::kMismatch, "mismatch"},
    {ErrorKind::kBackend, "backend"},    {ErrorKind::kStopped, "stopped"}};

namespace {
// Lock-free, so that a signal handler may set it (request_stop).
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);
}  // namespace

void request_stop() noexcept {
  g_stop_requested.store(true, std::memory_order_relaxed);
}

const char* to_string(ErrorKind kind) noexcept {
  return core::name_of(kind, kErrorKindNames, "backend").data();
}

namespace detail {

bool stop_requested() noexcept {
  return g_stop_requested.load(std::memory_order_relaxed);
}

Error stopped(const std::string& what) {
  return Error(ErrorKind::kStopped, what + ": stopped (a stop signal: request_stop())");
}

void say(std::string_view line) {
  std::string whole(line);
  whole += '\n';
  // Best effort: a closed stderr has nowhere to report to.
  for (std::string_view rest = whole; !rest.empty();) {
    const ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    rest.remove_prefix(static_cast<size_t>(n));
  }
}

std::string first_line(const std::exception& e) {
  return std::string(core::first_line(e.what()));
}

std::string hex_bytes(const std::string& b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : b) {
    const auto u = static_cast<unsigned char>(c);
    if (!out.empty()) out += ' ';
    out += kHex[u >> 4];
    out += kHex[u & 0xf];
  }
  return out;
}

std::string format_ranks(const std::vector<int>& ranks, size_t limit) {
  return core::compact_ranges(std::vector<std::uint32_t>(ranks.begin(), ranks.end()), limit);
}

ErrorKind classify_backend_failure(const std::string& message) {
  const std::string_view m = message;
  // Gloo: "Timed out waiting 2000ms for recv operation to complete"; NCCL's own watchdog below.
  if (m.find("Timed out") != m.npos || m.find("timed out") != m.npos || m.find("Timeout") != m.npos)
    return ErrorKind::kTimeout;
  // Gloo: "Connection closed by peer [10.0.0.2]:4711", "Connection reset by peer", a broken
  // pipe on write; NCCL: ncclRemoteError ("remote process exited or there was a network error").
  if (m.find("closed by peer") != m.npos || m.find("reset by peer") != m.npos ||
      m.find("Broken pipe") != m.npos || m.find("remote process exited") != m.npos ||
      m.find("Connection refused") != m.npos)
    return ErrorKind::kPeerLost;
  return ErrorKind::kBackend;
}

}  // namespace detail
}  // namespace dtlaunch::ddp
