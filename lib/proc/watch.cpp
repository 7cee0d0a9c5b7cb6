#include "proc/watch.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ostream>

#include "core/error.hpp"
#include "proc/footprint.hpp"
#include "proc/reaper.hpp"
#include "proc/signal_pipe.hpp"
#include "proc/spawn.hpp"

namespace dtlaunch::proc {

namespace {

// Every signal a program may be sent and can catch or be stopped by: Slurm's (SIGCONT, SIGTERM,
// --signal's choice), a terminal's, the runtime's flight-recorder dump (SIGUSR2).
const std::vector<int> kForwarded = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1,  SIGUSR2, SIGALRM,
                                     SIGTERM, SIGCONT, SIGTSTP, SIGWINCH, SIGXCPU, SIGPWR};

int shell_status(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// The program's status once it has exited (reaped), nullopt while it runs.
std::optional<int> reap(pid_t pid) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return shell_status(status);
    if (r == 0) return std::nullopt;
    if (errno == EINTR) continue;
    throw core::Error::system("waitpid", errno);
  }
}

// The program's group: the program and what it started; the program alone when it has left
// its group (setsid), which empties the group.
void signal_program(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

int millis_left(std::chrono::steady_clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count()) + 1;
}

// The program has been reaped: what it left behind goes as in local mode (supervisor.cpp's
// finish). A child that kept the task's stdout open would otherwise hold the srun step long after
// the program ended (64 s in issue 35's probe); as a subreaper this process also has the ones that
// left the program's group (setsid), re-parented to it.
void sweep_leftovers(pid_t program_group) {
  ::kill(-program_group, SIGKILL);
  kill_all_children();
}

}  // namespace

int watch_program(const WorkerProcess& program, const WatchOptions& options, std::ostream& err) {
  SignalPipe signals(kForwarded);
  SubreaperScope subreaper;
  const StartedWorker started = start_inheriting(program);
  const pid_t pid = started.pid;
  if (started.exec_errno != 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (options.before_return) options.before_return();
    return started.exec_errno == ENOENT ? 127 : 126;
  }
  // From here on this process only waits, for years of training if need be: the code that
  // parsed, planned and started (and what the kernel mapped around it, up to 64 KB per fault)
  // need not stay resident. VmRSS 4.8-5.1 MB before, in slurm.watch; docs/cli.md has after.
  release_code_pages();
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> kill_at;  // set once a loss stopped the program
  bool killed = false;
  for (;;) {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {options.lost_fd, POLLIN, 0}};
    const nfds_t n = (options.lost_fd >= 0 && !kill_at) ? 2 : 1;
    const int timeout = kill_at && !killed ? millis_left(*kill_at) : -1;
    const int ready = ::poll(fds, n, timeout);
    if (ready < 0 && errno != EINTR) throw core::Error::system("poll", errno);
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      for (const int sig : signals.drain()) {
        if (sig != SIGCHLD) signal_program(pid, sig);
      }
    }
    if (const auto status = reap(pid)) {
      sweep_leftovers(pid);
      if (options.before_return) options.before_return();
      return kill_at ? static_cast<int>(core::ExitCode::kPeerLost) : *status;
    }
    if (n == 2 && ready > 0 && (fds[1].revents & (POLLIN | POLLHUP))) {
      err << (options.loss_line ? options.loss_line() : std::string("dtlaunch: a peer was lost"))
          << "\n";
      err.flush();
      // A stopped program only sees SIGTERM once it runs again. SIGCONT first: after, it would
      // discard a stop the exiting program asked for (terminate_group in supervisor.cpp).
      signal_program(pid, SIGCONT);
      signal_program(pid, SIGTERM);
      kill_at = Clock::now() + options.grace;
    }
    if (kill_at && !killed && Clock::now() >= *kill_at) {
      signal_program(pid, SIGKILL);
      killed = true;
    }
  }
}

}  // namespace dtlaunch::proc
