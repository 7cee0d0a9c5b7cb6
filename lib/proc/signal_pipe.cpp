#include "proc/signal_pipe.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"

namespace dtlaunch::proc {

namespace {

// Handlers cannot capture state, so the one live SignalPipe publishes what they need here.
int g_write_fd = -1;
pid_t g_owner = 0;

struct Saved {
  int sig;
  struct sigaction old;
};
// Fixed-size so that restore_in_child() touches no heap; NSIG bounds the distinct signals.
Saved g_saved[NSIG];
int g_saved_count = 0;

void on_signal(int sig) {
  const int saved_errno = errno;
  // A forked child that has not yet reset its handlers must not speak for the supervisor.
  if (::getpid() == g_owner) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] const ssize_t n = ::write(g_write_fd, &byte, 1);
  }
  errno = saved_errno;
}

void change(int sig, void (*handler)(int)) {
  struct sigaction act {};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_RESTART;
  if (sig == SIGCHLD) act.sa_flags |= SA_NOCLDSTOP;
  struct sigaction old {};
  if (::sigaction(sig, &act, &old) != 0) throw core::Error::system("sigaction", errno);
  g_saved[g_saved_count++] = Saved{sig, old};
}

void restore_all() noexcept {
  for (int i = g_saved_count - 1; i >= 0; --i)
    ::sigaction(g_saved[i].sig, &g_saved[i].old, nullptr);
  g_saved_count = 0;
  g_write_fd = -1;
  g_owner = 0;
}

}  // namespace

SignalPipe::SignalPipe(const std::vector<int>& forwarded) {
  Pipe p = make_pipe();
  // Non-blocking both ways: a handler must never block, and drain() must return when empty.
  if (::fcntl(p.read.get(), F_SETFL, O_NONBLOCK) != 0 ||
      ::fcntl(p.write.get(), F_SETFL, O_NONBLOCK) != 0)
    throw core::Error::system("fcntl", errno);
  read_ = std::move(p.read);
  write_ = std::move(p.write);
  g_write_fd = write_.get();
  g_owner = ::getpid();
  g_saved_count = 0;
  try {
    for (int sig : forwarded) {
      struct sigaction current {};
      ::sigaction(sig, nullptr, &current);
      if (current.sa_handler == SIG_IGN) continue;
      change(sig, on_signal);
    }
    change(SIGCHLD, on_signal);
    change(SIGPIPE, SIG_IGN);
  } catch (...) {
    restore_all();
    throw;
  }
}

SignalPipe::~SignalPipe() {
  restore_all();
}

std::vector<int> SignalPipe::drain() {
  std::vector<int> sigs;
  unsigned char buf[64];
  for (;;) {
    const ssize_t n = ::read(read_.get(), buf, sizeof buf);
    if (n > 0) {
      sigs.insert(sigs.end(), buf, buf + n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return sigs;  // empty (EAGAIN) or closed
    }
  }
}

void SignalPipe::restore_in_child() noexcept {
  for (int i = 0; i < g_saved_count; ++i) {
    struct sigaction act {};
    const struct sigaction& old = g_saved[i].old;
    // A handler of the launcher means nothing after exec (exec resets caught signals), but an
    // ignored signal stays ignored: pass that on, as a shell would. Not for SIGCHLD: a worker
    // with it ignored would have its children reaped behind its back (waitpid: ECHILD).
    const bool ignored =
        !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN && g_saved[i].sig != SIGCHLD;
    act.sa_handler = ignored ? SIG_IGN : SIG_DFL;
    sigemptyset(&act.sa_mask);
    ::sigaction(g_saved[i].sig, &act, nullptr);
  }
}

BlockAllSignals::BlockAllSignals() {
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_);
}

BlockAllSignals::~BlockAllSignals() {
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void BlockAllSignals::unblock_in_child() const noexcept {
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace dtlaunch::proc
