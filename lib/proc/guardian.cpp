#include "proc/guardian.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <vector>

#include "core/error.hpp"
#include "proc/signal_pipe.hpp"

namespace dtlaunch {

namespace {

constexpr int kGuardFd = 3;

// Closes every descriptor but kGuardFd, so that the guardian keeps no pipe of dtlaunch's or a
// worker's open (a reader of dtlaunch's output would otherwise wait for the guardian's EOF).
void close_all_but_guard_fd() noexcept {
  for (int fd = 0; fd < kGuardFd; ++fd) ::close(fd);
  if (::close_range(kGuardFd + 1, ~0U, 0) != 0) {
    const long max = ::sysconf(_SC_OPEN_MAX);
    for (long fd = kGuardFd + 1; fd < (max > 0 && max < 65536 ? max : 65536); ++fd)
      ::close(static_cast<int>(fd));
  }
}

[[noreturn]] void guard(int read_fd, pid_t* groups, std::size_t capacity) noexcept {
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
  if (!disarmed)
    for (std::size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

Guardian::Guardian(std::size_t capacity) {
  Pipe p = make_pipe();
  std::vector<pid_t> groups(capacity == 0 ? 1 : capacity);  // the child's storage: no malloc there
  {
    BlockAllSignals block;
    pid_ = ::fork();
    if (pid_ == 0) {
      SignalPipe::restore_in_child();
      guard(p.read.get(), groups.data(), groups.size());
    }
  }
  if (pid_ < 0) throw Error::system("fork", errno);
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

}  // namespace dtlaunch
