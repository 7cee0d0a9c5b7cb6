// What a group knows about its own collectives, for the day one hangs: sequence numbers, the
// flight recorder (a ring of the last N, recorder.hpp) and its files (record_file.hpp, on demand,
// on SIGUSR2 through dump_signal.hpp, at exit or on an error), the clocks lined up with rank 0's
// (clock_align.hpp), the cross-rank report through the rendezvous store (rank_report.hpp), the
// opt-in mismatch check and rank 0's startup line (startup_line.hpp). The rest of the runtime
// uses this facade; the parts are Monitor's. Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dtlaunch/ddp.h"
#include "record_file.hpp"
#include "recorder.hpp"
#include "startup_line.hpp"

namespace dtlaunch::core {
class EnvMap;  // core/env_map.hpp, which the runtime's tests cannot include
}  // namespace dtlaunch::core

namespace dtlaunch::ddp::detail {

// The environment variables of the diagnostics (docs/ddp.md, "When a job hangs").
struct MonitorSettings {
  size_t trace_entries = 2000;  // DTLAUNCH_DDP_TRACE_ENTRIES (at most kMaxTraceEntries); 0: none
  std::string trace_dir;        // DTLAUNCH_DDP_TRACE_DIR; "": no files
  bool trace_at_exit = false;   // DTLAUNCH_DDP_TRACE_AT_EXIT=1
  // DTLAUNCH_DDP_DUMP_SIGNAL (default 1): SIGUSR2 writes the flight recorder; 0 leaves SIGUSR2
  // alone. A handler the program installed itself is never replaced.
  bool dump_signal = true;
  // The files' names: DTLAUNCH_RUN_ID (made safe for a file name) and the attempt,
  // TORCHELASTIC_RESTART_COUNT + SLURM_RESTART_COUNT.
  std::string run_id;
  int attempt = 0;
  bool check = false;     // DTLAUNCH_DDP_CHECK=1
  bool timeline = false;  // DTLAUNCH_DDP_TIMELINE=1: rank 0's startup line always
  // DTLAUNCH_DDP_REPORT_GRACE_MS: how long a failed rank waits for the others' positions;
  // default twice the watchers' poll interval (0.2 s up to 1000 ranks, world/1000 s beyond,
  // at most 2 s) plus 0.5 s.
  std::chrono::milliseconds grace{900};
  // DTLAUNCH_DDP_HEARTBEAT_TIMEOUT (whole seconds): how long a peer may be unresponsive
  // (peer_watch.hpp); 0: no heartbeat.
  std::chrono::milliseconds heartbeat_timeout{10000};

  // Throws dtlaunch::core::Error naming a malformed variable (RuntimeSettings::read, settings.hpp).
  static MonitorSettings read(const core::EnvMap& env, int world_size);
};

std::string checkin_record(const WorkerEnv& env);

struct WatcherState;
struct ClockAlignment;

class Monitor {
 public:
  Monitor(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store,
          std::chrono::milliseconds timeout, MonitorSettings settings);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Answers other ranks' reports from a thread of its own (on a second store connection).
  void start_watcher();

  FlightRecorder& recorder() noexcept { return *recorder_; }
  const FlightRecorder& recorder() const noexcept { return *recorder_; }
  bool check_enabled() const noexcept { return settings_.check; }

  // The error to throw for collective `seq`, which failed with `cause` (a backend error already
  // classified): for a timeout or a lost peer, after the cross-rank report. Writes the flight
  // recorder file either way.
  Error failure(uint64_t seq, const Error& cause);
  // Any other error of the runtime on this group: recorded, returned as it is.
  const Error& record(const Error& e);
  // Writes DIR/<run>.a<attempt>.rank-<R>[.error].json; returns its path, or "" when there is no
  // DTLAUNCH_DDP_TRACE_DIR or the file could not be written (warned about once on stderr).
  // Callable from any thread.
  std::string write_file(const std::string& reason, DumpKind kind = DumpKind::kRequest) const;

  // SIGUSR2's work, on the dump thread: the file, and one line on stderr saying where this rank
  // is now.
  void dump_on_signal() const;

  // Rank 0's one line after init, or "" when there is nothing to say.
  std::string startup_line(const StartupPhases& phases);

 private:
  std::string report(uint64_t seq);
  // The flight record's header for a dump now.
  flight::Header record_header(const std::string& reason, DumpKind kind) const;

  WorkerEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  MonitorSettings settings_;
  std::string host_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<WatcherState> watcher_;
  std::shared_ptr<ClockAlignment> clock_;
  std::atomic<bool> error_written_{false};
  mutable std::atomic<bool> write_warned_{false};
  bool dump_registered_ = false;
};

}  // namespace dtlaunch::ddp::detail
