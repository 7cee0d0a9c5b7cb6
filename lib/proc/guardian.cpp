#include "proc/guardian.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "proc/signal_pipe.hpp"

namespace dtlaunch::proc {

namespace {

constexpr int kGuardFd = 3;
// How much of a process's environment the sweep reads: Linux takes argv + environ up to a
// quarter of the stack limit (2 MiB under the usual 8 MiB), so 4 MiB holds them whole.
constexpr std::size_t kEnvironScratch = 4 << 20;

struct linux_dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Closes every descriptor but kGuardFd, so that the guardian keeps no pipe of dtlaunch's or a
// worker's open (a reader of dtlaunch's output would otherwise wait for the guardian's EOF).
void close_all_but_guard_fd() noexcept {
  for (int fd = 0; fd < kGuardFd; ++fd) ::close(fd);
  if (close_range_from(kGuardFd + 1, 0) != 0) {
    const long max = ::sysconf(_SC_OPEN_MAX);
    for (long fd = kGuardFd + 1; fd < (max > 0 && max < 65536 ? max : 65536); ++fd)
      ::close(static_cast<int>(fd));
  }
}

// Whether the NUL-separated environment block env[0, len) holds the entry `marker`.
bool holds_entry(const char* env, std::size_t len, std::string_view marker) noexcept {
  for (std::size_t start = 0; start < len;) {
    const void* nul = std::memchr(env + start, '\0', len - start);
    const std::size_t end =
        nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - env) : len;
    if (end - start == marker.size() && std::memcmp(env + start, marker.data(), marker.size()) == 0)
      return true;
    start = end + 1;
  }
  return false;
}

// One pass over /proc: SIGKILL to every other process whose environment holds `marker`.
// Returns how many were sent. No allocation (this runs in a forked child): getdents64 into a
// stack buffer, each environment read into `scratch`; of a longer one only the first
// scratch_size bytes are looked at.
std::size_t kill_marked(std::string_view marker, char* scratch, std::size_t scratch_size) noexcept {
  const int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  const pid_t self = ::getpid();
  std::size_t killed = 0;
  alignas(8) char entries[8192];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir, entries, sizeof entries);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const linux_dirent64*>(entries + off);
      off += d->d_reclen;
      pid_t pid = 0;
      const char* c = d->d_name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 1 || pid == self) continue;
      char path[32];
      std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(pid));
      const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // gone, or not ours to read
      std::size_t len = 0;
      for (ssize_t got;
           len < scratch_size && (got = ::read(fd, scratch + len, scratch_size - len)) != 0;) {
        if (got < 0) {
          if (errno == EINTR) continue;
          break;
        }
        len += static_cast<std::size_t>(got);
      }
      ::close(fd);
      if (holds_entry(scratch, len, marker) && ::kill(pid, SIGKILL) == 0) ++killed;
    }
  }
  ::close(dir);
  return killed;
}

[[noreturn]] void guard(int read_fd, pid_t* groups, std::size_t capacity, std::string_view marker,
                        char* scratch, std::size_t scratch_size) noexcept {
  ::setpgid(0, 0);
  ::prctl(PR_SET_NAME, "dtlaunch-guard");
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE})
    ::signal(sig, SIG_IGN);
  if (read_fd != kGuardFd) ::dup2(read_fd, kGuardFd);
  close_all_but_guard_fd();
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  std::size_t count = 0;
  bool disarmed = false;
  for (;;) {
    pid_t msg;
    const ssize_t n = ::read(kGuardFd, &msg, sizeof msg);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof msg)) break;  // EOF: dtlaunch closed it or died
    if (msg == 0) {
      disarmed = true;
    } else if (count < capacity) {
      groups[count++] = msg;
    }
  }
  if (!disarmed) {
    for (std::size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
    // A process killed in one round may have forked in the meantime: its child inherited the
    // marker and is found in the next. Bounded, so that a fork bomb cannot keep us here.
    if (!marker.empty())
      for (int round = 0; round < 50 && kill_marked(marker, scratch, scratch_size) > 0; ++round) {
      }
  }
  ::_exit(0);
}

}  // namespace

Guardian::Guardian(std::size_t capacity, std::string_view marker) {
  Pipe p = make_pipe();
  // The child's storage, allocated here: no malloc there. `marker` needs no copy: the fork
  // copies the caller's string with everything else.
  std::vector<pid_t> groups(capacity == 0 ? 1 : capacity);
  // Not initialised: the pages stay untouched unless the guardian ever sweeps.
  const std::size_t scratch_size = marker.empty() ? 1 : kEnvironScratch;
  std::unique_ptr<char[]> scratch(new char[scratch_size]);
  {
    BlockAllSignals block;
    pid_ = ::fork();
    if (pid_ == 0) {
      SignalPipe::restore_in_child();
      guard(p.read.get(), groups.data(), groups.size(), marker, scratch.get(), scratch_size);
    }
  }
  if (pid_ < 0) throw core::Error::system("fork", errno);
  write_ = std::move(p.write);
}

void Guardian::watch(pid_t pgid) {
  // 4-byte writes to a pipe are atomic. A guardian that is gone (EPIPE) cannot be helped.
  if (write_) write_all(write_.get(), {reinterpret_cast<const char*>(&pgid), sizeof pgid});
}

void Guardian::disarm() {
  if (pid_ <= 0) return;
  if (write_) {
    const pid_t zero = 0;
    write_all(write_.get(), {reinterpret_cast<const char*>(&zero), sizeof zero});
    write_.reset();
  }
  if (!reaped_) {
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

}  // namespace dtlaunch::proc
