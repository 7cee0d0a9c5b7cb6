#include "driver.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/hmac.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "job/srun_output.hpp"
#include "outcome.hpp"
#include "proc/fd.hpp"
#include "proc/output_relay.hpp"

extern char** environ;

namespace dtlaunch::job {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// srun, so that a signal to the batch script (scancel, preemption) reaches the step.
volatile sig_atomic_t g_srun_pid = 0;
volatile sig_atomic_t g_stop_signal = 0;

// SIGUSR1 and SIGUSR2 go to srun, which passes them to the tasks. SIGTERM, SIGINT and SIGHUP
// do not: srun answers SIGTERM with "forcing job termination" (the tasks are SIGKILLed, and a
// program that checkpoints on SIGTERM never sees it) and a single SIGINT with a status line.
// They stop the job, and the main loop delivers them to the step's tasks (deliver_to_tasks).
void forward_signal(int sig) {
  if (sig == SIGUSR1 || sig == SIGUSR2) {
    if (g_srun_pid > 0) ::kill(static_cast<pid_t>(g_srun_pid), sig);
    return;
  }
  g_stop_signal = sig;
}

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
pid_t spawn_srun(const std::vector<std::string>& argv, int out_fd, int err_fd) {
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

// One stream of srun (its stdout or stderr): passed on, the labels srun puts on the tasks' lines
// taken off, and read line by line (srun_output.hpp).
struct Stream {
  core::UniqueFd fd;
  int to = -1;
  SrunOutput reader;
};

// Passes srun's output on through the console, which never blocks (a stalled reader must not stop
// supervision: signals, the stop escalation, the next attempt). Pieces of at most PIPE_BUF bytes,
// cut after a line's end where there is one, so that what is dropped is mostly whole lines.
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

struct AttemptRun {
  Evidence evidence;
  int status = 0;
  milliseconds wall{0};
  milliseconds stop{0};
};

// Waits up to 100 ms for srun's output or for room in our own, reads what came into `evidence` and
// writes what waited.
void pump_ready(Stream (&streams)[2], proc::Console& console) {
  pollfd fds[4];
  nfds_t n = 0;
  for (auto& s : streams)
    if (s.fd) fds[n++] = {s.fd.get(), POLLIN, 0};
  for (int fd : {STDOUT_FILENO, STDERR_FILENO})
    if (const int waiting = console.waiting_fd(fd); waiting >= 0) fds[n++] = {waiting, POLLOUT, 0};
  if (::poll(fds, n, 100) <= 0) return;
  for (auto& s : streams)
    for (nfds_t i = 0; i < n; ++i)
      if (s.fd.get() == fds[i].fd && fds[i].revents) pump(s, console);
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) console.flush(fd);
}

// Ends a step that does not end after a failure (a cut-off node's slurmstepd does not answer) or
// after the operator's signal: `grace` after it srun's own abort (SIGINT twice), 5 s later
// scancel of the job's running steps, 10 s after that SIGKILL of srun.
class StepStopper {
 public:
  StepStopper(pid_t srun, std::string job_id, milliseconds grace)
      : srun_(srun), job_id_(std::move(job_id)), grace_(grace) {}

  // `since`: when the step was first asked to end; `after_what` says by what, for the log.
  void advance(Clock::time_point since, std::string_view after_what, Evidence& evidence,
               std::ostream& err) {
    const auto now = Clock::now();
    if (stage_ == Stage::kWaiting && now - since > grace_) {
      err << "dtlaunch job: the step has not ended " << core::duration_text(grace_) << " after "
          << after_what << ": asking srun to abort it" << std::endl;
      ::kill(srun_, SIGINT);
      ::usleep(200 * 1000);
      ::kill(srun_, SIGINT);  // twice within a second: srun cancels the step
      next(Stage::kAborted, now);
    } else if (stage_ == Stage::kAborted && now - since_ > milliseconds(5000)) {
      for (const auto& step : running_steps(job_id_)) {
        err << "dtlaunch job: scancel " << step << " (the step does not end)" << std::endl;
        capture({"scancel", step});
      }
      evidence.cancelled = true;
      next(Stage::kCancelled, now);
    } else if (stage_ == Stage::kCancelled && now - since_ > milliseconds(10000)) {
      ::kill(srun_, SIGKILL);
      next(Stage::kKilled, now);
    }
  }

 private:
  enum class Stage { kWaiting, kAborted, kCancelled, kKilled };
  void next(Stage stage, Clock::time_point now) {
    stage_ = stage;
    since_ = now;
  }
  pid_t srun_;
  std::string job_id_;
  milliseconds grace_;
  Stage stage_ = Stage::kWaiting;
  Clock::time_point since_{};
};

// The operator's SIGTERM, SIGINT or SIGHUP, delivered to the tasks of the job's steps (not to
// the batch script: scancel leaves the batch step out unless told), so that a program that
// checkpoints on SIGTERM and exits 75 gets its grace; srun stays to report how they ended.
void deliver_to_tasks(const std::string& job_id, int sig, std::ostream& err) {
  err << "dtlaunch job: got " << core::signal_text(sig) << ": passing it to the tasks (scancel "
      << "--signal=" << sig << " " << job_id << "); nothing is restarted" << std::endl;
  capture({"scancel", "--signal=" + std::to_string(sig), job_id});
}

AttemptRun run_attempt(const std::vector<std::string>& argv, bool strip_labels,
                       const core::JobKey& key, const std::string& job_id, milliseconds grace,
                       proc::Console& console, std::ostream& err) {
  AttemptRun run;
  const auto observe = [&evidence = run.evidence, &key](std::string_view line, LineSource source) {
    observe_line(line, source, key, evidence);
  };
  proc::Pipe out = srun_pipe(), errs = srun_pipe();
  const auto start = Clock::now();
  const pid_t pid = spawn_srun(argv, out.write.get(), errs.write.get());
  g_srun_pid = pid;
  out.write.reset();
  errs.write.reset();
  Stream streams[2] = {{std::move(out.read), STDOUT_FILENO, SrunOutput(strip_labels, observe)},
                       {std::move(errs.read), STDERR_FILENO, SrunOutput(strip_labels, observe)}};
  StepStopper stopper(pid, job_id, grace);
  std::optional<Clock::time_point> first_failure, signalled;
  int wstatus = 0;
  bool reaped = false;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(Clock::now() - t);
  };
  while (!reaped || streams[0].fd || streams[1].fd) {
    pump_ready(streams, console);
    if (!reaped && ::waitpid(pid, &wstatus, WNOHANG) == pid) {
      reaped = true;
      g_srun_pid = 0;
      run.wall = since(start);
      if (first_failure) run.stop = since(*first_failure);
    }
    if (reaped) {
      // srun is gone; a task's output may still be held by a stray process: not for long.
      if (since(start) > run.wall + milliseconds(2000)) break;
      continue;
    }
    if (const int sig = g_stop_signal; sig && !signalled) {
      signalled = Clock::now();
      deliver_to_tasks(job_id, sig, err);
    }
    const bool failing = !run.evidence.failures.empty() || !run.evidence.lost_nodes.empty();
    if (failing && !first_failure) first_failure = Clock::now();
    if (signalled && (!first_failure || *signalled < *first_failure))
      stopper.advance(*signalled, "the signal", run.evidence, err);
    else if (first_failure)
      stopper.advance(*first_failure, "the first failure", run.evidence, err);
  }
  for (auto& s : streams) s.fd.reset();
  if (!reaped) {
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    g_srun_pid = 0;
    run.wall = since(start);
  }
  run.status = shell_status(wstatus);
  return run;
}

// The steps are over; what their output left waiting for a slow reader is written as it takes it,
// unless the driver was told to stop: then the rest is dropped, with a word, rather than keeping
// the batch script (and its allocation) waiting for that reader.
void deliver_rest(proc::Console& console) {
  while (!console.idle() && !g_stop_signal) {
    pollfd fds[2];
    nfds_t n = 0;
    for (int fd : {STDOUT_FILENO, STDERR_FILENO})
      if (const int waiting = console.waiting_fd(fd); waiting >= 0)
        fds[n++] = {waiting, POLLOUT, 0};
    if (n == 0) break;
    ::poll(fds, n, 100);
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) console.flush(fd);
  }
  if (!console.idle()) console.discard("stopping on signal " + std::to_string(g_stop_signal));
}

}  // namespace

int run_job(const JobOptions& options, const std::string& dtlaunch, bool json,
            const core::EnvMap& env, std::ostream& err) {
  if (options.program.empty())
    throw core::Error::usage("job: no PROGRAM given (dtlaunch job -- ./train)");
  const Allocation allocation = read_allocation(env);
  const Sizes sizes = decide_sizes(allocation, options);
  err << "dtlaunch job: " << allocation.nodes.size() << " node(s) allocated ("
      << hostlist::compress(allocation.nodes) << "): " << sizes.nodes << " used, " << sizes.spares
      << " spare, " << sizes.tasks_per_node << " task(s) per node, up to " << options.max_restarts
      << " restart(s)" << std::endl;
  install_forwarding();
  proc::Console console;

  std::set<std::string> excluded;
  std::vector<AttemptRecord> attempts;
  int status = 0;
  std::string result;
  for (std::uint32_t restart = 0;; ++restart) {
    auto nodes = choose_nodes(allocation.nodes, excluded, sizes.nodes);
    if (nodes.size() < sizes.min_nodes) {
      result = out_of_nodes(nodes.size(), excluded, sizes, options);
      break;
    }
    const core::JobKey key = core::make_job_key();
    for (const auto& [name, value] : attempt_environment(restart, core::to_hex(key)))
      ::setenv(name.c_str(), value.c_str(), 1);
    const auto argv = srun_command(dtlaunch, nodes, sizes, allocation, options, restart);
    err << "dtlaunch job: attempt " << restart + 1 << " on " << hostlist::compress(nodes)
        << (restart ? " (restart " + std::to_string(restart) + ")" : std::string()) << std::endl;
    AttemptRun run = run_attempt(argv, !srun_labels_asked(options.srun_args), key,
                                 allocation.job_id, options.stop_grace, console, err);
    AttemptRecord record;
    record.attempt = restart + 1;
    record.nodes = nodes;
    record.outcome = classify(run.evidence, nodes, run.status, options.no_retry_exits);
    // The tasks that ended on the operator's signal are nobody's fault.
    if (g_stop_signal && record.outcome.decision == Decision::kRestart) {
      record.outcome.culprits.clear();
      record.outcome.signature.clear();
      record.outcome.cause = "stopped by " + core::signal_text(g_stop_signal);
    }
    record.wall = run.wall;
    record.stop = run.stop;
    status = record.outcome.exit_status;
    err << attempt_line(record) << std::endl;
    const Decision decision = record.outcome.decision;
    attempts.push_back(record);
    if (decision == Decision::kSucceeded) {
      result = restart ? "completed after " + std::to_string(restart) + " restart(s)" : "completed";
      break;
    }
    if (g_stop_signal) {
      result = "stopped by signal " + std::to_string(g_stop_signal) + ": not restarted";
      if (decision == Decision::kPreempted) status = 75;
      break;
    }
    if (decision == Decision::kPreempted || decision == Decision::kPermanent) {
      result = "not retried: " + record.outcome.cause;
      break;
    }
    if (restart == options.max_restarts) {
      result = "stopped: the restart budget (--max-restarts " +
               std::to_string(options.max_restarts) + ") is spent";
      break;
    }
    if (const auto why = repeated_failure(attempts)) {
      result = "stopped: " + *why;
      break;
    }
    excluded.insert(record.outcome.culprits.begin(), record.outcome.culprits.end());
  }
  // The JSON line goes the way of the program's output, after it, and never blocks either.
  if (json) console.write(STDOUT_FILENO, summary_json(attempts, result, status));
  deliver_rest(console);
  err << summary_table(attempts, result) << std::flush;
  return status == 0 && result.rfind("completed", 0) != 0 ? 1 : status;
}

}  // namespace dtlaunch::job
