#include "driver.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/hmac.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "job/srun_output.hpp"
#include "launch/system.hpp"
#include "live_driver.hpp"
#include "outcome.hpp"
#include "proc/fd.hpp"
#include "proc/output_relay.hpp"
#include "srun_process.hpp"

namespace dtlaunch::job {

namespace {

using namespace detail;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

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
  const std::vector<Stream*> both = {&streams[0], &streams[1]};
  StepStopper stopper(pid, job_id, grace);
  std::optional<Clock::time_point> first_failure, signalled;
  int wstatus = 0;
  bool reaped = false;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(Clock::now() - t);
  };
  while (!reaped || streams[0].fd || streams[1].fd) {
    pump_ready(both, console);
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

// Why the job ends after the last of `attempts`, or nothing when it restarts. `used`: restarts
// and live replacements so far, out of the budget.
std::optional<std::string> job_ends(const std::vector<AttemptRecord>& attempts, std::uint32_t used,
                                    std::uint32_t replacements, const JobOptions& options) {
  const AttemptRecord& last = attempts.back();
  const Decision decision = last.outcome.decision;
  const std::uint32_t restarts = static_cast<std::uint32_t>(attempts.size() - 1);
  if (decision == Decision::kSucceeded) {
    std::string result =
        restarts ? "completed after " + std::to_string(restarts) + " restart(s)" : "completed";
    if (replacements) result += ", " + std::to_string(replacements) + " node(s) replaced live";
    return result;
  }
  if (g_stop_signal)
    return "stopped by signal " + std::to_string(g_stop_signal) + ": not restarted";
  if (decision == Decision::kPreempted || decision == Decision::kPermanent)
    return "not retried: " + last.outcome.cause;
  if (used >= options.max_restarts)
    return "stopped: the restart budget (--max-restarts " + std::to_string(options.max_restarts) +
           ") is spent";
  if (const auto why = repeated_failure(attempts)) return "stopped: " + *why;
  return std::nullopt;
}

std::string resolve_store_program(const std::string& program, const core::EnvMap& env) {
  try {
    return launch::resolve_program(program, contract::read_text(env, contract::setting::kPath));
  } catch (const core::Error& e) {
    throw core::Error(core::ExitCode::kBadInput, std::string("--store-program: ") + e.what());
  }
}

}  // namespace

int run_job(const JobOptions& options, const std::string& dtlaunch, bool json,
            const core::EnvMap& env, std::ostream& err) {
  if (options.program.empty())
    throw core::Error::usage("job: no PROGRAM given (dtlaunch job -- ./train)");
  if (options.live && options.watch)
    throw core::Error::usage(
        "job: --live needs a program on dtlaunch's DDP runtime, which recovers in place; "
        "--watch programs (Python) are restarted: drop one of them");
  const Allocation allocation = read_allocation(env);
  const Sizes sizes = decide_sizes(allocation, options);
  JobOptions checked = options;  // --live: the store's program found before anything starts
  if (options.live) checked.store_program = resolve_store_program(options.store_program, env);
  err << "dtlaunch job: " << allocation.nodes.size() << " node(s) allocated ("
      << hostlist::compress(allocation.nodes) << "): " << sizes.nodes << " used, " << sizes.spares
      << " spare, " << sizes.tasks_per_node << " task(s) per node, up to " << options.max_restarts
      << " restart(s)" << std::endl;
  install_forwarding();
  proc::Console console;

  std::set<std::string> excluded;
  std::uint32_t replacements = 0;  // --live: nodes replaced while the job ran, in the budget
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
    err << "dtlaunch job: attempt " << restart + 1 << " on " << hostlist::compress(nodes)
        << (restart ? " (restart " + std::to_string(restart) + ")" : std::string()) << std::endl;
    AttemptRecord record;
    record.attempt = restart + 1;
    AttemptRun run;
    const bool strip_labels = !srun_labels_asked(options.srun_args);
    if (options.live) {
      LiveAttempt live =
          run_live_attempt({dtlaunch, allocation, sizes, options, nodes, excluded,
                            options.max_restarts - restart - replacements, strip_labels},
                           key, console, err);
      run = std::move(live.run);
      nodes = std::move(live.nodes);
      record.replaced = std::move(live.replaced);
      replacements += static_cast<std::uint32_t>(record.replaced.size());
      excluded.insert(live.lost.begin(), live.lost.end());
    } else {
      run = run_attempt(srun_command(dtlaunch, nodes, sizes, allocation, options, restart),
                        strip_labels, key, allocation.job_id, options.stop_grace, console, err);
    }
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
    attempts.push_back(record);
    if (g_stop_signal && record.outcome.decision == Decision::kPreempted) status = 75;
    if (auto end = job_ends(attempts, restart + replacements, replacements, options)) {
      result = std::move(*end);
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
