// The descriptors of local mode: close-on-exec pipes, descriptors moved out of a worker's way,
// and the table's size for closing the rest after clone.
#pragma once

#include "core/fd.hpp"

namespace dtlaunch::proc {

// The owned descriptor and the whole-buffer write are core's (heartbeat and the runtime need them
// too); the names stay usable here unqualified.
using core::UniqueFd;
using core::write_all;

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

}  // namespace dtlaunch::proc
