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

// 1 + the highest descriptor open now (0 when none), from /proc/self/fd.
int fd_table_top();

// Writes all of data, retrying short writes and EINTR, and waiting in poll() when fd is
// non-blocking. Returns false on any other error (EPIPE: the reader is gone).
bool write_all(int fd, std::string_view data);

}  // namespace dtlaunch::proc
