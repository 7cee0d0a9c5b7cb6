#include "proc/fd.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <string>

#include "core/error.hpp"

namespace dtlaunch::proc {

int close_range_from(unsigned first, unsigned flags) noexcept {
#ifdef SYS_close_range
  return static_cast<int>(::syscall(SYS_close_range, first, ~0U, flags));
#else
  (void)first;
  (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw core::Error::system("pipe", errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

UniqueFd move_at_or_above(UniqueFd fd, int base) {
  if (!fd || fd.get() >= base) return fd;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, base);
  if (moved < 0) return fd;
  return UniqueFd(moved);  // the original is closed as `fd` goes
}

int fd_table_top() {
  int top = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = 0;
    const std::string name = entry.path().filename();
    const auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), fd);
    if (err == std::errc() && end == name.data() + name.size()) top = std::max(top, fd + 1);
  }
  return top;
}

}  // namespace dtlaunch::proc
