// The node-local all_reduce of the Gloo group: when every rank of the group runs on this node
// (same hostname, boot id and NODE_RANK), float32/float64 all_reduces go through one POSIX
// shared-memory segment instead of Gloo's TCP loopback (docs/ddp.md, "Shared-memory
// all_reduce"). When the ranks span several nodes, each node has its own segment and the
// all_reduce is hierarchical (docs/ddp.md, "Across nodes"): the tensor is reduced inside the
// node, each of the node's first K ranks all-reduces its 1/K slice of it with the same slice on
// the other nodes (the group's InterNode, over Gloo: one call per collective), and the node's
// ranks copy the result out. K is the smallest number of ranks any node has. Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// Whether the process `pid` that started at `start_ticks` (field 22 of /proc/PID/stat) still
// runs: false once it is gone, a zombie, or its pid belongs to a newer process.
bool process_alive(int pid, uint64_t start_ticks);
// This process's start time in clock ticks after boot (field 22 of /proc/self/stat); 0 if unknown.
uint64_t own_start_ticks();

// This boot's id (/proc/sys/kernel/random/boot_id); "" if unknown.
std::string boot_id();

// Removes this user's segments in /dev/shm named PREFIX-PID-TICKS-NONCE whose creator (PID,
// started at TICKS) is gone.
void remove_stale_segments(const std::string& prefix);

// The nodes of a group, from one key per rank (ranks with equal keys share a node): each node's
// ranks in rank order, the nodes in the order of their first rank.
std::vector<std::vector<int>> group_by_node(const std::vector<std::string>& node_keys);

class ShmAllReduce {
 public:
  // Starts the all_reduce of `part` (a part of this rank's slice of the tensor, reduced over its
  // node) with the same part on every other node, sum, min or max, and returns its wait, which
  // throws Error. Parts finish in the order they started.
  using InterNode = std::function<std::function<void()>(const at::Tensor& part, ReduceOp op)>;

  // Bytes of one rank's slot: a larger tensor is reduced in chunks of this size.
  static constexpr size_t kSlotBytes = size_t{1} << 20;

  // Collective over the store: every rank of the group calls it once at group creation, with
  // shm on or off for itself. Returns nullptr (and every rank agrees) when the group has one
  // rank, when any rank turned shm off, when the ranks are not all on this node, or, after one
  // line on rank 0's stderr, when the segment could not be created or mapped everywhere.
  // Throws (kTimeout, kBackend) when the store fails, as the rest of group creation does.
  // `abort`: set by the heartbeat on a lost peer (peer_watch.hpp; null without one): a waiting
  // all_reduce then fails with kPeerLost within kLivenessEvery instead of the collective timeout.
  // `across_nodes`: this rank's DTLAUNCH_DDP_HIER. With the ranks on several nodes, the
  // hierarchical all_reduce is set up when every rank has it on and some node has two ranks or
  // more (else nullptr: Gloo's ring over all ranks); the group must then attach_inter_node()
  // before the first start().
  static std::unique_ptr<ShmAllReduce> create(const WorkerEnv& env, bool enabled, bool across_nodes,
                                              c10d::Store& store, std::chrono::milliseconds timeout,
                                              std::shared_ptr<const std::atomic<bool>> abort);
  ~ShmAllReduce();
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  // Across nodes: the global ranks that all-reduce this rank's slice, one per node in node
  // order, this rank among them; empty when this rank owns no slice or the group has one node.
  const std::vector<int>& slice_group() const;
  // Which slice this rank owns (its index on its node); meaningful when slice_group() is not
  // empty.
  int slice() const;
  int node_count() const;
  void attach_inter_node(InterNode inter_node);

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
