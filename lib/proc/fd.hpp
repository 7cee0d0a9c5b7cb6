// Owned file descriptors and the few whole-buffer I/O helpers the supervisor needs.
#pragma once

#include <string_view>
#include <utility>

namespace dtlaunch::proc {

// Closes its descriptor when destroyed; -1 means none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read, write;
};

// pipe2(O_CLOEXEC): no descriptor of ours leaks into a worker unless dup2'ed on purpose.
// Throws Error::system.
Pipe make_pipe();

// The descriptor moved to the lowest free number >= base (close-on-exec), or fd itself when
// that fails (no free number there under RLIMIT_NOFILE).
UniqueFd move_at_or_above(UniqueFd fd, int base);

// close_range(2) by its system call: glibc's wrapper is 2.34's, above the release launcher's glibc
// floor (scripts/package.sh). -1 with errno ENOSYS on a kernel before 5.9 (RHEL 8's 4.18):
// callers fall back. flags: 0 or kCloseRangeUnshare. Async-signal-safe (used after clone).
inline constexpr unsigned kCloseRangeUnshare = 1U << 1;  // CLOSE_RANGE_UNSHARE, Linux 5.9
int close_range_from(unsigned first, unsigned flags) noexcept;

// 1 + the highest descriptor open now (0 when none), from /proc/self/fd.
int fd_table_top();

// Writes all of data, retrying short writes and EINTR, and waiting in poll() when fd is
// non-blocking. Returns false on any other error (EPIPE: the reader is gone).
bool write_all(int fd, std::string_view data);

}  // namespace dtlaunch::proc
