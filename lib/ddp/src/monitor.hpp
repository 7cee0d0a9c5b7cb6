// What a group knows about its own collectives, for the day one hangs: sequence numbers, the
// flight recorder (a ring of the last N), the cross-rank report through the rendezvous store, the
// opt-in mismatch check and rank 0's startup line. Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

enum class Op : uint8_t { kAllReduce, kBroadcast, kAllGather, kBarrier };
const char* op_name(Op op) noexcept;
// PyTorch's names ("float32", "bfloat16"), which the people reading a report know; "" for -1.
std::string dtype_name(int8_t dtype);

// The environment variables of the diagnostics (docs/ddp.md, "When a job hangs").
struct MonitorSettings {
  size_t trace_entries = 2000;  // DTLAUNCH_DDP_TRACE_ENTRIES; 0: no recorder
  std::string trace_dir;        // DTLAUNCH_DDP_TRACE_DIR; "": no files
  bool trace_at_exit = false;   // DTLAUNCH_DDP_TRACE_AT_EXIT=1
  bool check = false;           // DTLAUNCH_DDP_CHECK=1
  bool timeline = false;        // DTLAUNCH_DDP_TIMELINE=1: rank 0's startup line always
  // DTLAUNCH_DDP_REPORT_GRACE_MS: how long a failed rank waits for the others' positions;
  // default twice the watchers' poll interval (0.2 s up to 1000 ranks, world/1000 s beyond,
  // at most 2 s) plus 0.5 s.
  std::chrono::milliseconds grace{900};
  // DTLAUNCH_DDP_HEARTBEAT_TIMEOUT (whole seconds): silence after which a peer is lost
  // (peer_watch.hpp); 0: no heartbeat.
  std::chrono::milliseconds heartbeat_timeout{10000};

  // Throws kConfig naming a malformed variable.
  static MonitorSettings from_environment(int world_size);
};

// One collective in the ring.
struct CollectiveRecord {
  uint64_t seq = 0;  // 0: an empty slot
  Op op = Op::kBarrier;
  int8_t dtype = -1;  // at::ScalarType, -1 for a barrier
  int root = -1;
  int64_t numel = 0;
  int64_t start_us = 0;  // wall clock, microseconds since the epoch
  int64_t end_us = 0;    // 0 while in flight
  enum class State : uint8_t { kStarted, kCompleted, kFailed } state = State::kStarted;
};

// "all_reduce #5 (float32, 256 elements)".
std::string describe(const CollectiveRecord& r);

// The ring and the position derived from it; shared with the watcher thread, which may outlive
// the group.
class FlightRecorder {
 public:
  explicit FlightRecorder(size_t entries) : ring_(entries) {}
  uint64_t begin(Op op, const at::Tensor* tensor, int root);
  void end(uint64_t seq, bool ok);
  uint64_t started() const noexcept { return next_seq_.load(std::memory_order_relaxed); }
  // The record of `seq` if the ring still holds it (a bare one with seq and op otherwise).
  CollectiveRecord find(uint64_t seq) const;
  // The latest collective this rank entered (seq 0 when none).
  CollectiveRecord last() const;
  std::vector<CollectiveRecord> entries() const;  // oldest first

 private:
  std::atomic<uint64_t> next_seq_{0};
  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> ring_;
  CollectiveRecord last_;  // kept even with an empty ring
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
  std::string write_file(const std::string& reason) const;

  // Rank 0's one line after init, or "" when there is nothing to say.
  std::string startup_line(const StartupPhases& phases);

 private:
  std::string report(uint64_t seq, const CollectiveRecord& mine);

  WorkerEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  MonitorSettings settings_;
  std::string host_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<WatcherState> watcher_;
  std::atomic<bool> error_written_{false};
};

}  // namespace dtlaunch::ddp::detail
