// The supervision loop. One attempt = one group of workers, from start to the last reap:
//   start all (fork+exec) -> poll { signal pipe, every worker's stdout/stderr } until every
//   worker is reaped -> kill and reap what they left (subreaper sweep) -> drain the pipes.
// The first failure sends SIGTERM to the other workers' groups and arms the grace deadline,
// after which they get SIGKILL; a SIGINT/SIGTERM/SIGHUP to dtlaunch does the same after being
// forwarded. run_workers repeats attempts while restarts are allowed.
#include "proc/supervisor.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "core/error.hpp"
#include "core/exec_error.hpp"
#include "core/host.hpp"
#include "core/text.hpp"
#include "proc/failure_report.hpp"
#include "proc/guardian.hpp"
#include "proc/output_relay.hpp"
#include "proc/reaper.hpp"
#include "proc/signal_pipe.hpp"
#include "proc/spawn.hpp"

namespace dtlaunch::proc {

namespace {

using Clock = std::chrono::steady_clock;

// Caught while workers run: the first five are forwarded; SIGTSTP and SIGCONT make the group
// stop and continue with dtlaunch, as a shell's job would.
const std::vector<int> kCaught = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT};

bool is_termination(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

// A termination signal to a worker's group, with SIGCONT: a stopped process (SIGSTOP) keeps the
// signal pending until it is continued, and would spend the whole grace period stopped before
// its SIGKILL. SIGCONT goes first: sent after, it discards any stop signal pending by then, and a
// worker that the termination signal already has exiting may have asked for one — LeakSanitizer
// at exit PTRACE_ATTACHes its own process, whose SIGSTOP a late SIGCONT discarded: the tracer
// then waited for that stop forever, and the worker never exited (tests/proc, Ctrl-Z under ASan).
void terminate_group(pid_t pgid, int sig) {
  ::kill(-pgid, SIGCONT);
  ::kill(-pgid, sig);
}

// "1 worker", "3 workers".
std::string workers_text(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " worker" : " workers");
}

// Workers get their stdio from us by dup2; a dtlaunch started with 0, 1 or 2 closed would hand
// out those numbers to our pipes and tangle them.
void ensure_standard_fds_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

struct Worker {
  WorkerProcess spec;
  pid_t pid = -1;  // also its process group; valid as a group id only while not reaped
  bool running = false;
  int wait_status = 0;
  // dtlaunch sent it SIGKILL because it was still running when the grace period ended.
  bool killed_after_grace = false;
  LineTail tail;
  UniqueFd out_fd, err_fd;
  std::unique_ptr<StreamRelay> out, err;

  Worker(WorkerProcess s, std::size_t tail_lines) : spec(std::move(s)), tail(tail_lines) {}
};

// How a reaped worker ended, for the report. stop_signal and grace: what it was sent before the
// SIGKILL that ended it, when dtlaunch sent that SIGKILL at the grace period's end.
WorkerFailure failure_of(const Worker& w, int stop_signal, std::chrono::milliseconds grace) {
  WorkerFailure f;
  f.rank = w.spec.rank;
  f.local_rank = w.spec.local_rank;
  if (WIFSIGNALED(w.wait_status)) {
    f.signal = WTERMSIG(w.wait_status);
    f.core_dumped = WCOREDUMP(w.wait_status);
  } else {
    f.exit_code = WEXITSTATUS(w.wait_status);
  }
  f.last_lines = w.tail.lines();
  if (w.killed_after_grace && f.signal == SIGKILL) {
    f.ignored_signal = stop_signal;
    f.grace = grace;
  }
  return f;
}

struct AttemptResult {
  std::optional<WorkerFailure> failure;
  bool terminated = false;  // dtlaunch got SIGINT, SIGTERM or SIGHUP during the attempt
};

class Attempt {
 public:
  // high_fds: where the descriptors held for the workers go (start_worker's copy_below).
  Attempt(std::vector<WorkerProcess> specs, const SupervisorOptions& options, SignalPipe& signals,
          Console& console, LogFiles& logs, int high_fds, const rlimit* worker_fd_limit)
      : high_fds_(high_fds),
        worker_fd_limit_(worker_fd_limit),
        options_(options),
        signals_(signals),
        console_(console),
        guardian_(specs.size(), options.descendant_marker) {
    workers_.reserve(specs.size());
    for (WorkerProcess& spec : specs) {
      LogFile* log = logs.for_rank(spec.rank);
      Worker& w = workers_.emplace_back(std::move(spec), options.tail_lines);
      const std::string prefix = rank_prefix(w.spec.rank);
      w.out = std::make_unique<StreamRelay>(console_, STDOUT_FILENO, prefix, log, w.tail);
      w.err = std::make_unique<StreamRelay>(console_, STDERR_FILENO, prefix, log, w.tail);
    }
  }

  // Whatever way we leave (an exception included), no worker and no descendant survives.
  ~Attempt() {
    if (finished_) return;
    for (Worker& w : workers_) {
      if (!w.running) continue;
      ::kill(-w.pid, SIGKILL);
      int status;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    guardian_.disarm();
    kill_all_children();
  }

  AttemptResult run() {
    start_all();
    while (any_running()) step();
    finish();
    AttemptResult result;
    result.terminated = terminated_;
    if (first_failure_)
      result.failure = failure_of(workers_[*first_failure_], stop_signal_, options_.grace);
    return result;
  }

 private:
  void start_all() {
    UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull) throw core::Error::system("/dev/null", errno);
    // Each start returns once its worker has exec'd; loading the program and its libraries
    // then overlaps with the next starts.
    for (Worker& w : workers_) {
      StartedWorker s = start_worker(w.spec, devnull.get(), high_fds_, worker_fd_limit_);
      w.pid = s.pid;
      w.running = true;
      index_of_pid_.emplace(s.pid, static_cast<std::size_t>(&w - workers_.data()));
      guardian_.watch(s.pid);
      // Up out of the part of the table that the next workers' starts copy.
      w.out_fd = move_at_or_above(std::move(s.out), high_fds_);
      w.err_fd = move_at_or_above(std::move(s.err), high_fds_);
      if (s.exec_errno != 0) throw core::exec_error(w.spec.program_path, s.exec_errno);
    }
  }

  bool any_running() const {
    for (const Worker& w : workers_)
      if (w.running) return true;
    return false;
  }

  void step() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;  // (worker, is stderr) per fds[i >= 1]
    fds.push_back({signals_.fd(), POLLIN, 0});
    for (Worker& w : workers_) {
      if (w.out_fd) fds.push_back({w.out_fd.get(), POLLIN, 0}), owners.emplace_back(&w, false);
      if (w.err_fd) fds.push_back({w.err_fd.get(), POLLIN, 0}), owners.emplace_back(&w, true);
    }
    // Output waiting for a slow reader is written as the reader takes it, never blocking.
    const std::size_t console_at = fds.size();
    for (int fd : {STDOUT_FILENO, STDERR_FILENO})
      fds.push_back({console_.waiting_fd(fd), POLLOUT, 0});
    int timeout = -1;
    if (deadline_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now());
      timeout = static_cast<int>(std::max<std::int64_t>(0, left.count()));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
      throw core::Error::system("poll", errno);

    for (int sig : signals_.drain()) on_signal(sig);
    for (int fd : {STDOUT_FILENO, STDERR_FILENO})
      if (fds[console_at + static_cast<std::size_t>(fd - 1)].revents != 0) console_.flush(fd);
    for (std::size_t i = 1; i < console_at; ++i) {
      if (fds[i].revents == 0) continue;
      auto [w, is_err] = owners[i - 1];
      pump(is_err ? w->err_fd : w->out_fd, is_err ? *w->err : *w->out);
    }
    // Reaping on every pass, not only on SIGCHLD, makes a lost signal byte harmless.
    reap();
    if (deadline_ && Clock::now() >= *deadline_) {
      const std::size_t n = kill_running(true);
      if (n > 0) {
        console_.write(STDERR_FILENO, "dtlaunch: " + workers_text(n) + " still running " +
                                          core::duration_text(options_.grace) + " after " +
                                          core::signal_text(stop_signal_) + ": sent SIGKILL\n");
      }
    }
  }

  // SIGKILL now to every worker still running; returns how many. Disarms the grace period.
  // at_deadline: because the grace period is over (the report then says so).
  std::size_t kill_running(bool at_deadline) {
    deadline_.reset();
    killed_ = true;
    std::size_t n = 0;
    for (Worker& w : workers_) {
      if (!w.running) continue;
      ::kill(-w.pid, SIGKILL);
      w.killed_after_grace = at_deadline;
      ++n;
    }
    return n;
  }

  // Reads what is there once; at EOF relays the partial last line and closes the pipe.
  static void pump(UniqueFd& fd, StreamRelay& relay) {
    char buf[65536];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      relay.feed({buf, static_cast<std::size_t>(n)});
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      relay.finish();
      fd.reset();
    }
  }

  void on_signal(int sig) {
    switch (sig) {
      case SIGCHLD:
        return;  // reaped on every pass anyway
      case SIGTSTP:
        return stop_like_a_job();
      case SIGCONT:
        return continue_like_a_job();
      default:
        break;
    }
    // The same SIGINT/SIGTERM/SIGHUP a second time while the workers are being stopped: "stop
    // now", as torchrun and most supervisors take it (Ctrl-C twice). A different one is still
    // forwarded once: a worker may handle SIGHUP and SIGTERM differently.
    const std::uint32_t bit = 1U << sig;
    const bool again = (termination_seen_ & bit) != 0;
    if (is_termination(sig)) termination_seen_ |= bit;
    if (is_termination(sig) && again && !killed_) {
      const std::size_t n = kill_running(false);
      console_.write(STDERR_FILENO, "dtlaunch: got " + core::signal_text(sig) +
                                        " again: sent SIGKILL to the " + workers_text(n) +
                                        " still running\n");
      return;
    }
    for (Worker& w : workers_) {
      if (!w.running) continue;
      if (is_termination(sig))
        terminate_group(w.pid, sig);
      else
        ::kill(-w.pid, sig);
    }
    if (!is_termination(sig) || terminated_) return;
    console_.write(STDERR_FILENO, "dtlaunch: got " + core::signal_text(sig) +
                                      ", passed it to the workers; SIGKILL in " +
                                      core::duration_text(options_.grace) +
                                      " if they do not exit (or on a second signal)\n");
    terminated_ = true;
    if (!deadline_) stop_signal_ = sig;
    arm_deadline();
  }

  // Ctrl-Z: the workers are in process groups of their own, which the terminal does not stop.
  // Stop them (SIGSTOP: a worker cannot ignore it, so the whole job really stops), then
  // ourselves, so that the shell sees a stopped job; `fg` or `bg` continues us (SIGCONT).
  void stop_like_a_job() {
    for (Worker& w : workers_)
      if (w.running) ::kill(-w.pid, SIGSTOP);
    const Clock::time_point stopped_at = Clock::now();
    ::kill(::getpid(), SIGSTOP);
    // Time spent stopped is not grace time: the workers could not use it.
    if (deadline_) *deadline_ += Clock::now() - stopped_at;
    continue_like_a_job();
  }

  void continue_like_a_job() {
    for (Worker& w : workers_)
      if (w.running) ::kill(-w.pid, SIGCONT);
  }

  void arm_deadline() {
    if (!deadline_ && !killed_) deadline_ = Clock::now() + options_.grace;
  }

  void reap() {
    // Everything that has exited is reaped before any failure is acted on, so that a worker
    // that exited at the same time is not counted among those that get SIGTERM.
    std::optional<std::size_t> failed;
    for (;;) {
      int status;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;  // 0: none exited; -1 ECHILD: no child at all
      if (pid == guardian_.pid()) guardian_.mark_reaped();
      const auto it = index_of_pid_.find(pid);
      // Any other pid was an orphan re-parented to us (we are a subreaper): reaped, done.
      if (it == index_of_pid_.end()) continue;
      const std::size_t index = it->second;
      index_of_pid_.erase(it);
      Worker& w = workers_[index];
      w.running = false;
      w.wait_status = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !first_failure_ && !failed) failed = index;
    }
    if (failed) on_first_failure(*failed);
  }

  void on_first_failure(std::size_t index) {
    first_failure_ = index;
    // After a SIGINT/SIGTERM/SIGHUP the others already have it and may be saving state: the
    // armed grace period alone bounds their exit.
    if (terminated_) return;
    stop_signal_ = SIGTERM;
    std::size_t others = 0;
    for (Worker& w : workers_) {
      if (!w.running) continue;
      terminate_group(w.pid, SIGTERM);
      ++others;
    }
    if (others == 0) return;
    const Worker& failed = workers_[index];
    const int st = failed.wait_status;
    console_.write(STDERR_FILENO, "dtlaunch: rank " + std::to_string(failed.spec.rank) + " " +
                                      describe_outcome(WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                                                       WIFSIGNALED(st) ? WTERMSIG(st) : 0) +
                                      "; sent SIGTERM to the " + std::to_string(others) +
                                      " other " + (others == 1 ? "worker" : "workers") +
                                      " still running, SIGKILL in " +
                                      core::duration_text(options_.grace) + "\n");
    arm_deadline();
  }

  // Every worker is reaped. Kill what they left (it all came back to us as orphans, or is a
  // descendant of such an orphan), then relay what is still in the pipes.
  void finish() {
    guardian_.disarm();
    kill_all_children();
    finished_ = true;
    // Nobody of ours can write any more; what is left in the pipes is read until EOF. A
    // descriptor passed outside our tree could keep a pipe open forever: bounded wait.
    for (Worker& w : workers_) {
      for (auto [fd, relay] : {std::pair{&w.out_fd, w.out.get()}, {&w.err_fd, w.err.get()}}) {
        while (*fd) {
          pollfd p{fd->get(), POLLIN, 0};
          if (::poll(&p, 1, 1000) <= 0) {
            relay->finish();
            fd->reset();
            break;
          }
          pump(*fd, *relay);
        }
      }
    }
  }

  const int high_fds_;
  const rlimit* worker_fd_limit_;  // what the workers get back, when we raised ours
  const SupervisorOptions& options_;
  SignalPipe& signals_;
  Console& console_;
  Guardian guardian_;
  std::vector<Worker> workers_;
  std::unordered_map<pid_t, std::size_t> index_of_pid_;  // the workers not yet reaped
  std::optional<std::size_t> first_failure_;
  std::uint32_t termination_seen_ = 0;  // bit N: signal N was received
  int stop_signal_ = SIGTERM;           // what the workers got before the grace period's SIGKILL
  std::optional<Clock::time_point> deadline_;
  bool killed_ = false;  // the deadline passed and SIGKILL was sent: never re-armed
  bool finished_ = false;
  bool terminated_ = false;
};

// Room in RLIMIT_NOFILE for what `workers` workers need from dtlaunch: two pipes each (and a
// log file), above the table as it is now plus the 64 of high_fds and a few of our own. A
// soft limit that is too low is raised, as far as needed, when the hard one allows: for
// dtlaunch alone; the workers get the old one back (returned). Throws Error (kBadInput).
std::optional<rlimit> make_room_for_descriptors(std::size_t workers, bool log_files,
                                                Console& console) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return std::nullopt;
  const std::uint64_t need =
      static_cast<std::uint64_t>(fd_table_top()) + 64 + 16 + workers * (log_files ? 3 : 2);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= need) return std::nullopt;
  const auto text = [](rlim_t n) {
    return n == RLIM_INFINITY ? std::string("unlimited") : std::to_string(n);
  };
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < need)
    throw core::Error(core::ExitCode::kBadInput,
                      workers_text(workers) + " need " + std::to_string(need) +
                          " file descriptors, and the limit (ulimit -n) is " +
                          text(limit.rlim_cur) + " with a hard limit of " + text(limit.rlim_max) +
                          ": raise it (ulimit -n " + std::to_string(need) +
                          ") or start fewer workers");
  rlimit raised = limit;
  raised.rlim_cur = need;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) throw core::Error::system("setrlimit", errno);
  console.warn("dtlaunch: raised its soft limit of file descriptors (ulimit -n) from " +
               text(limit.rlim_cur) + " to " + std::to_string(need) + " for " +
               workers_text(workers) + "; the workers keep " + text(limit.rlim_cur) + "\n");
  return limit;
}

// Every worker is gone; what their output left waiting for a slow reader of stdout is written
// as the reader takes it. After a termination signal, or on one now, the user asked to stop:
// the rest is dropped, with a word, rather than keeping them waiting for that reader.
void deliver_rest(Console& console, SignalPipe& signals, bool terminated) {
  if (terminated) {
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) console.flush(fd);
    if (!console.idle()) console.discard("stopping on a signal");
    return;
  }
  while (!console.drain(signals.fd())) {
    for (int sig : signals.drain())
      if (is_termination(sig)) return console.discard("got " + core::signal_text(sig));
  }
}

}  // namespace

RunResult run_workers(
    const std::function<std::vector<WorkerProcess>(std::uint32_t restart_count)>& make_workers,
    const SupervisorOptions& options) {
  ensure_standard_fds_open();
  // Every descriptor we hold per worker (pipes, log files) goes at or above high_fds, and
  // everything below it, what we inherited included, stays where it is: a worker's start then
  // copies a table that does not grow with the number of workers (spawn.hpp). 64 leaves room
  // for the few descriptors of our own opened below it (signal pipe, guardian, /dev/null).
  Console console;
  std::vector<WorkerProcess> first = make_workers(0);
  const std::optional<rlimit> worker_fd_limit =
      make_room_for_descriptors(first.size(), options.log_dir.has_value(), console);
  const int high_fds = fd_table_top() + 64;
  LogFiles logs(options.log_dir, high_fds);
  SignalPipe signals(kCaught);
  SubreaperScope subreaper;
  const std::string host = core::host_name();

  RunResult result;
  for (std::uint32_t restart = 0;; ++restart) {
    std::vector<WorkerProcess> specs = restart == 0 ? std::move(first) : make_workers(restart);
    const std::size_t count = specs.size();
    AttemptResult attempt;
    {
      Attempt a(std::move(specs), options, signals, console, logs, high_fds,
                worker_fd_limit ? &*worker_fd_limit : nullptr);
      attempt = a.run();
    }
    result.restarts = restart;
    result.first_failure = attempt.failure;
    result.exit_status = attempt.failure ? exit_status_of(*attempt.failure) : 0;
    if (!attempt.failure) {
      deliver_rest(console, signals, attempt.terminated);
      return result;
    }
    console.write(STDERR_FILENO, format_failure_report(*attempt.failure, host));
    // Exit 75 asks to be run again later (after a requeue), not now: the group ends and 75 is
    // passed through, as it is without --max-restarts.
    if (attempt.terminated || restart >= options.max_restarts ||
        is_stopped_to_resume(*attempt.failure)) {
      deliver_rest(console, signals, attempt.terminated);
      return result;
    }
    console.write(STDERR_FILENO, "dtlaunch: restarting all " + std::to_string(count) +
                                     " workers (restart " + std::to_string(restart + 1) + " of " +
                                     std::to_string(options.max_restarts) + ")\n");
  }
}

}  // namespace dtlaunch::proc
