#include "core/socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace dtlaunch::core {

int connect_until(const addrinfo& address, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds cap) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          address.ai_protocol);
  if (fd < 0) return -errno;
  int err = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof err;
    if (::poll(&p, 1,
               static_cast<int>(std::clamp<std::int64_t>(
                   left.count(), 1, std::min<std::int64_t>(cap.count(), INT_MAX)))) != 1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = ETIMEDOUT;
  }
  if (err == 0) return fd;
  ::close(fd);
  return -err;
}

}  // namespace dtlaunch::core
