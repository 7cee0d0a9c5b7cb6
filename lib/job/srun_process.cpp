// The processes of `dtlaunch job` (srun_process.hpp).
#include "srun_process.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ostream>

#include "core/error.hpp"
#include "core/text.hpp"

extern char** environ;

namespace dtlaunch::job::detail {

// srun, so that a signal to the batch script (scancel, preemption) reaches the step.
volatile sig_atomic_t g_srun_pid = 0;
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_user_signal = 0;

namespace {

// SIGUSR1 and SIGUSR2 go to srun, which passes them to the tasks. SIGTERM, SIGINT and SIGHUP
// do not: srun answers SIGTERM with "forcing job termination" (the tasks are SIGKILLed, and a
// program that checkpoints on SIGTERM never sees it) and a single SIGINT with a status line.
// They stop the job, and the main loop delivers them to the step's tasks (deliver_to_tasks).
void forward_signal(int sig) {
  if (sig == SIGUSR1 || sig == SIGUSR2) {
    if (g_srun_pid > 0)
      ::kill(static_cast<pid_t>(g_srun_pid), sig);
    else
      g_user_signal = sig;  // several sruns (--live): the main loop passes it to each
    return;
  }
  g_stop_signal = sig;
}

}  // namespace

void install_forwarding() {
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  // A reader that went away (`dtlaunch job ... | head`) is an EPIPE the console drops quietly,
  // not the driver's death with the step left to run on: the same policy as local mode.
  ::signal(SIGPIPE, SIG_IGN);
}

pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw core::Error::system("cannot start " + argv[0], rc);
  return pid;
}

// srun dies with the driver: a SIGKILL of `dtlaunch job` (the OOM killer, a hard kill of the
// batch step) would otherwise leave the step running with nobody to stop it. SIGTERM, not
// SIGKILL: srun answers it by ending the step, where a killed srun leaves its step to run on.
// Forked, not posix_spawn'ed, for PR_SET_PDEATHSIG; an exec failure comes back through a
// close-on-exec pipe as errno.
pid_t spawn_srun(const std::vector<std::string>& argv, int out_fd, int err_fd,
                 const std::vector<std::pair<std::string, std::string>>& extra_env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw core::Error::system("cannot create a pipe", errno);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw core::Error::system("cannot start " + argv[0], e);
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the driver died before prctl
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
    // The driver is one thread: its environment can be changed in the child.
    for (const auto& [name, value] : extra_env) ::setenv(name.c_str(), value.c_str(), 1);
    ::execvp(args[0], args.data());
    const int e = errno;
    [[maybe_unused]] const ssize_t n = ::write(report[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(report[1]);
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw core::Error::system("cannot start " + argv[0], exec_errno);
  }
  return pid;
}

int shell_status(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

// Runs a helper (squeue, scancel) to completion and returns its stdout.
std::string capture(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  core::UniqueFd out(fds[0]), child_out(fds[1]);
  pid_t pid = -1;
  try {
    pid = spawn(argv, child_out.get(), -1);
  } catch (const core::Error&) {
    return {};
  }
  child_out.reset();
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  out.reset();
  int ws = 0;
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return text;
}

// The job's running steps other than the batch and extern ones: the driver runs one at a time,
// so they are this attempt's.
std::vector<std::string> running_steps(const std::string& job_id) {
  std::vector<std::string> steps;
  const std::string text = capture({"squeue", "-h", "-s", "-j", job_id, "-o", "%i"});
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string id = text.substr(pos, end - pos);
    pos = end + 1;
    const auto dot = id.find('.');
    if (dot == std::string::npos) continue;
    const std::string step = id.substr(dot + 1);
    if (!step.empty() && step.find_first_not_of("0123456789") == std::string::npos)
      steps.push_back(id);
  }
  return steps;
}

// Passes srun's output on through the console, which never blocks (a stalled reader must not stop
// supervision: signals, the stop escalation, the next attempt). Pieces of at most PIPE_BUF bytes,
// cut after a line's end where there is one, so that what is dropped is mostly whole lines.
namespace {

void pass_on(proc::Console& console, int fd, std::string_view data) {
  while (!data.empty()) {
    std::size_t piece = std::min<std::size_t>(data.size(), PIPE_BUF);
    if (piece < data.size()) {
      const auto nl = data.substr(0, piece).rfind('\n');
      if (nl != std::string_view::npos) piece = nl + 1;
    }
    console.write(fd, data.substr(0, piece));
    data.remove_prefix(piece);
  }
}

}  // namespace

bool pump(Stream& s, proc::Console& console) {
  char buf[8192];
  const ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    pass_on(console, s.to, s.reader.finish());
    s.fd.reset();
    return false;
  }
  pass_on(console, s.to, s.reader.feed(std::string_view(buf, static_cast<size_t>(n))));
  return true;
}

// proc::make_pipe, with the message that says what the pipe was for.
proc::Pipe srun_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw core::Error::system("cannot create a pipe for srun", errno);
  return {core::UniqueFd(fds[0]), core::UniqueFd(fds[1])};
}

// Waits up to 100 ms for srun's output or for room in our own, reads what came and writes what
// waited.
void pump_ready(const std::vector<Stream*>& streams, proc::Console& console) {
  std::vector<pollfd> fds;
  for (Stream* s : streams)
    if (s->fd) fds.push_back({s->fd.get(), POLLIN, 0});
  for (int fd : {STDOUT_FILENO, STDERR_FILENO})
    if (const int waiting = console.waiting_fd(fd); waiting >= 0)
      fds.push_back({waiting, POLLOUT, 0});
  if (::poll(fds.data(), fds.size(), 100) <= 0) return;
  for (Stream* s : streams)
    for (const pollfd& p : fds)
      if (s->fd && s->fd.get() == p.fd && p.revents) pump(*s, console);
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) console.flush(fd);
}

// The operator's SIGTERM, SIGINT or SIGHUP, delivered to the tasks of the job's steps (not to
// the batch script: scancel leaves the batch step out unless told), so that a program that
// checkpoints on SIGTERM and exits 75 gets its grace; srun stays to report how they ended.
void deliver_to_tasks(const std::string& job_id, int sig, std::ostream& err) {
  err << "dtlaunch job: got " << core::signal_text(sig) << ": passing it to the tasks (scancel "
      << "--signal=" << sig << " " << job_id << "); nothing is restarted" << std::endl;
  capture({"scancel", "--signal=" + std::to_string(sig), job_id});
}

}  // namespace dtlaunch::job::detail
