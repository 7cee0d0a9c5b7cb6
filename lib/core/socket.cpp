#include "core/socket.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace dtlaunch::core {

int start_connect(const addrinfo& address) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          address.ai_protocol);
  if (fd < 0) return -errno;
  if (::connect(fd, address.ai_addr, address.ai_addrlen) == 0 || errno == EINPROGRESS) return fd;
  const int err = errno;
  ::close(fd);
  return -err;
}

int connect_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : errno;
}

int connect_until(const addrinfo& address, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds cap) {
  using std::chrono::steady_clock;
  const int fd = start_connect(address);
  if (fd < 0) return fd;
  // A signal cuts poll() short without ending the wait: the wait goes on to the same end.
  const auto now = steady_clock::now();
  const auto end =
      now + std::min(cap, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
  int ready = 0;
  pollfd p{fd, POLLOUT, 0};
  do {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - steady_clock::now()).count();
    ready = ::poll(&p, 1, static_cast<int>(std::clamp<std::int64_t>(left, 1, INT_MAX)));
  } while (ready < 0 && errno == EINTR && steady_clock::now() < end);
  const int err = ready == 1 ? connect_error(fd) : ETIMEDOUT;
  if (err == 0) return fd;
  ::close(fd);
  return -err;
}

std::set<OpenSocket> open_sockets() {
  std::set<OpenSocket> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  struct Closer {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  const std::unique_ptr<DIR, Closer> owner(dir);
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode))
      out.insert({static_cast<int>(fd), st.st_ino});
  }
  return out;
}

int peer_port(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return -1;
  if (peer.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(peer).sin_port);
  if (peer.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(peer).sin6_port);
  return -1;
}

}  // namespace dtlaunch::core
