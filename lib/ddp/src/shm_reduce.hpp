// The node-local all_reduce of the Gloo group: when every rank of the group runs on this node
// (same hostname and boot id), float32/float64 all_reduces go through one POSIX shared-memory
// segment instead of Gloo's TCP loopback (docs/ddp.md, "Shared-memory all_reduce"). Not
// installed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// Whether the process `pid` that started at `start_ticks` (field 22 of /proc/PID/stat) still
// runs: false once it is gone, a zombie, or its pid belongs to a newer process.
bool process_alive(int pid, uint64_t start_ticks);
// This process's start time in clock ticks after boot (field 22 of /proc/self/stat); 0 if unknown.
uint64_t own_start_ticks();

class ShmAllReduce {
 public:
  // Bytes of one rank's slot: a larger tensor is reduced in chunks of this size.
  static constexpr size_t kSlotBytes = size_t{1} << 20;

  // Collective over the store: every rank of the group calls it once at group creation, with
  // shm on or off for itself. Returns nullptr (and every rank agrees) when the group has one
  // rank, when any rank turned shm off, when the ranks are not all on this node, or, after one
  // line on rank 0's stderr, when the segment could not be created or mapped everywhere.
  // Throws (kTimeout, kBackend) when the store fails, as the rest of group creation does.
  // `abort`: set by the heartbeat on a lost peer (peer_watch.hpp; null without one): a waiting
  // all_reduce then fails with kPeerLost within kLivenessEvery instead of the collective timeout.
  static std::unique_ptr<ShmAllReduce> create(const WorkerEnv& env, bool enabled,
                                              c10d::Store& store, std::chrono::milliseconds timeout,
                                              std::shared_ptr<const std::atomic<bool>> abort);
  ~ShmAllReduce();
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  // float32 and float64 CPU tensors; the rest stays on Gloo.
  static bool supports(const at::Tensor& tensor);
  // Queues the all_reduce on the group's communication thread (FIFO, so every rank runs them in
  // the order it issued them) and returns at once.
  std::shared_ptr<Work> start(at::Tensor& tensor, ReduceOp op);
  // Returns once every all_reduce queued so far has ended, so that a Gloo collective issued
  // next starts after them, in issue order.
  void drain();

  struct Impl;

 private:
  explicit ShmAllReduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtlaunch::ddp::detail
