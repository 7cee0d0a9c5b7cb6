// What a group knows about its own collectives, for the day one hangs: sequence numbers, the
// flight recorder (a ring of the last N), the cross-rank report through the rendezvous store, the
// opt-in mismatch check and rank 0's startup line. Not installed.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "dtlaunch/ddp.h"

namespace dtlaunch::core {
class EnvMap;  // core/env_map.hpp, which the runtime's tests cannot include
}  // namespace dtlaunch::core

namespace dtlaunch::ddp::detail {

enum class Op : uint8_t { kAllReduce, kBroadcast, kAllGather, kBarrier };
const char* op_name(Op op) noexcept;
// PyTorch's names ("float32", "bfloat16"), which the people reading a report know; "" for -1.
std::string dtype_name(int8_t dtype);

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
  // DTLAUNCH_DDP_HEARTBEAT_TIMEOUT (whole seconds): silence after which a peer is lost
  // (peer_watch.hpp); 0: no heartbeat.
  std::chrono::milliseconds heartbeat_timeout{10000};

  // Throws dtlaunch::core::Error naming a malformed variable (RuntimeSettings::read, settings.hpp).
  static MonitorSettings read(const core::EnvMap& env, int world_size);
};

// 88 bytes a slot: the ring's cost is entries x 88 bytes once full, allocated as entries arrive.
inline constexpr size_t kMaxTraceEntries = 1'000'000;
inline constexpr int kMaxShapeDims = 4;

// One collective in the ring. Times are this rank's wall clock in microseconds since the epoch;
// the file carries the offset to rank 0's clock (clock_offset_us) that lines the ranks up.
struct CollectiveRecord {
  uint64_t seq = 0;  // 0: an empty slot
  Op op = Op::kBarrier;
  int8_t dtype = -1;  // at::ScalarType, -1 for a barrier
  int8_t dims = -1;   // the shape's rank; -1: no tensor, or more than kMaxShapeDims
  int root = -1;
  int64_t numel = 0;
  std::array<int64_t, kMaxShapeDims> shape{};
  int64_t enqueue_us = 0;  // the program called the runtime
  int64_t start_us = 0;  // handed to the backend (after DTLAUNCH_DDP_CHECK's exchange); 0: not yet
  int64_t end_us = 0;    // this rank saw it finish (wait() returned); 0 while in flight
  enum class State : uint8_t { kStarted, kCompleted, kFailed } state = State::kStarted;
};

// "all_reduce #5 (float32, 256 elements)".
std::string describe(const CollectiveRecord& r);

// The ring and the position derived from it; shared with the watcher thread, which may outlive
// the group.
class FlightRecorder {
 public:
  // Reserves nothing: a slot is allocated when its first entry arrives.
  explicit FlightRecorder(size_t entries) : capacity_(entries) {}
  uint64_t begin(Op op, const at::Tensor* tensor, int root);
  void handed_to_backend(uint64_t seq);
  void end(uint64_t seq, bool ok);
  // Bytes the ring holds now (its allocation), for the test that init costs no more than that.
  size_t allocated_bytes() const;
  uint64_t started() const noexcept { return next_seq_.load(std::memory_order_relaxed); }
  // The record of `seq` if the ring still holds it (a bare one with seq and op otherwise).
  CollectiveRecord find(uint64_t seq) const;
  // The latest collective this rank entered (seq 0 when none).
  CollectiveRecord last() const;
  std::vector<CollectiveRecord> entries() const;  // oldest first

 private:
  CollectiveRecord* slot(uint64_t seq);  // under mutex_; nullptr when the ring holds no seq

  const size_t capacity_;
  std::atomic<uint64_t> next_seq_{0};
  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> ring_;  // grows to capacity_, then wraps
  CollectiveRecord last_;               // kept even with an empty ring
};

// Timestamps of init_process_group's phases on this rank.
struct StartupPhases {
  std::chrono::steady_clock::time_point start, env_read, store_connected, all_checked_in,
      backend_ready;
  // How long rank 0 waited for the others after it checked in itself.
  std::chrono::milliseconds rank0_waited{0};
};

// A rank's record in the store at check-in: "host\nlocal_rank\nunix_ms".
std::string checkin_key(int rank);
std::string checkin_record(const WorkerEnv& env);

struct WatcherState;

// This rank's clock against rank 0's, measured through the store after init (an NTP-like
// exchange: rank 0's clock read between this rank's send and receive). offset_us added to this
// rank's wall clock gives rank 0's; the truth lies within error_us (half the round trip).
struct ClockAlignment {
  std::atomic<bool> known{false};
  std::atomic<int64_t> offset_us{0};
  std::atomic<int64_t> error_us{0};
};

// What a flight-recorder file is written for. An error's file is never replaced; the others
// (on demand, SIGUSR2, at exit) replace the previous one of the same rank and run.
enum class DumpKind { kError, kRequest, kSignal, kExit };

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
  std::string report(uint64_t seq, const CollectiveRecord& mine);
  // The flight record's JSON up to its entries.
  std::string record_head(const std::string& reason, DumpKind kind) const;

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
