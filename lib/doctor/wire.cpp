#include "doctor/wire.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <stdexcept>

namespace dtlaunch::doctor {

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
