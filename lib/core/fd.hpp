// Owned file descriptors and whole-buffer writes: every layer above core holds descriptors
// (the supervisor's pipes, the doctor's sockets, the runtime's files), so they live here.
#pragma once

#include <string_view>
#include <utility>

namespace dtlaunch::core {

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

// Writes all of data, retrying short writes and EINTR, and waiting in poll() when fd is
// non-blocking. Returns false on any other error, errno saying which (EPIPE: the reader is gone;
// ENOSPC: a full filesystem).
bool write_all(int fd, std::string_view data);

}  // namespace dtlaunch::core
