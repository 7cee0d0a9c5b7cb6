// Local mode's process supervision: start one group of workers, relay their output with rank
// prefixes, forward signals, stop the group on the first failure and restart it when asked.
// The environment of each worker is decided elsewhere (launch/worker_env.hpp); this file only
// starts what it is given and reports how it ended.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "affinity/apply.hpp"
#include "core/env_map.hpp"

namespace dtlaunch::proc {

// One worker to start: exec program_path with argv (argv[0] as the user wrote it) and exactly
// env, nothing inherited besides it. stdin is /dev/null; stdout and stderr are relayed.
struct WorkerProcess {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  std::string program_path;  // already resolved and checked executable by the caller
  std::vector<std::string> argv;
  core::EnvMap env;
  // CPUs and memory policy (--cpu-bind, --mem-bind), applied where the program starts: in the
  // child between fork and exec, or by exec_worker (proc/exec.hpp) just before its exec.
  std::shared_ptr<const affinity::PreparedBinding> binding;
};

// --grace's default: between the SIGTERM that stops a program and its SIGKILL, in local mode
// and under --watch alike.
inline constexpr std::chrono::milliseconds kDefaultGrace = std::chrono::seconds(30);

struct SupervisorOptions {
  // After the first failure (or a SIGINT/SIGTERM/SIGHUP to dtlaunch) the other workers get
  // SIGTERM, and SIGKILL once this much time has passed.
  std::chrono::milliseconds grace = kDefaultGrace;
  // Also write each rank's output, unprefixed, to <log_dir>/rank-<R>.log (created if missing,
  // truncated when run_workers starts, appended across restarts).
  std::optional<std::string> log_dir;
  // Restart the whole group after a failure at most this many times. A failure that follows a
  // termination signal sent to dtlaunch is never restarted.
  std::uint32_t max_restarts = 0;
  // Lines of output kept per worker for the failure report.
  std::size_t tail_lines = 20;
  // An environment entry ("NAME=value") that every worker's environment carries: if dtlaunch
  // is SIGKILLed, its guardian also kills every process whose environment holds it, which
  // catches descendants that left their worker's process group (setsid). Empty: groups only.
  std::string descendant_marker;
};

struct WorkerFailure {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  int exit_code = -1;  // -1 if killed by a signal
  int signal = 0;      // 0 if it exited
  bool core_dumped = false;
  std::vector<std::string> last_lines;  // oldest first, at most tail_lines, stdout and stderr
  // Non-zero when dtlaunch sent the SIGKILL that ended it: it was still running `grace` after
  // this signal (the SIGTERM that followed another worker's failure, or the SIGINT, SIGTERM or
  // SIGHUP that dtlaunch forwarded).
  int ignored_signal = 0;
  std::chrono::milliseconds grace{0};
};

struct RunResult {
  // What dtlaunch should exit with: 0 when every worker of the last attempt exited 0, else the
  // first failure's exit code, or 128+signal when it was killed by a signal.
  int exit_status = 0;
  std::optional<WorkerFailure> first_failure;  // of the last attempt
  std::uint32_t restarts = 0;                  // how many times the group was restarted
};

// Starts the workers make_workers(restart_count) returns (restart_count 0 first), supervises
// them, restarts the whole group up to options.max_restarts times after a failure, and returns
// once every worker and everything they started has exited and been reaped.
//
// While it runs it owns the process's children: it makes the process a child subreaper, reaps
// with waitpid(-1), and kills every descendant left when a group ends, so the caller must have
// no other children. It installs handlers for SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 (all
// forwarded to every worker's process group), SIGCHLD and SIGPIPE, and restores the previous
// ones before returning. The failure report ("dtlaunch: rank 3 (local 3) failed: exit 1" and
// the last lines) goes to stderr.
//
// Before starting anything it checks that RLIMIT_NOFILE leaves room for the descriptors the
// workers need (two pipes each, a log file each with log_dir): if only the soft limit is too
// low it raises it, for dtlaunch alone, and says so on stderr; if the hard one is, it throws
// Error (kBadInput) saying how many are needed.
//
// Throws dtlaunch::core::Error only for OS failures before or while starting (pipe, fork, the log
// directory), for a program that cannot be executed (ExitCode 127 / 126) and for the limit
// above; in every case the workers already started are killed and reaped first.
RunResult run_workers(
    const std::function<std::vector<WorkerProcess>(std::uint32_t restart_count)>& make_workers,
    const SupervisorOptions& options);

}  // namespace dtlaunch::proc
