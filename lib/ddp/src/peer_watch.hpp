// The heartbeat of the DDP runtime: each rank watches its ring successor on a small TCP
// endpoint of its own (lib/heartbeat), so that a rank that exits, freezes or drops off the
// network is named within DTLAUNCH_DDP_HEARTBEAT_TIMEOUT, whatever the collective timeout. On a
// verdict the group's connections are shut down, so that every pending Gloo collective fails at
// once and the process can exit, and every collective from then on throws kPeerLost with the
// verdict (docs/ddp.md, "Heartbeat"). Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "dtlaunch/ddp.h"

namespace dtlaunch::heartbeat {
class Node;
class Listener;
struct Verdict;
}  // namespace dtlaunch::heartbeat

namespace dtlaunch::ddp::detail {

class Monitor;

class PeerWatch {
 public:
  // Before the rendezvous: opens this rank's heartbeat endpoint and notes the sockets the
  // process has, so that the ones the runtime opens later can be shut down on a loss. null
  // when the timeout is 0 or the world is one rank.
  static std::shared_ptr<PeerWatch> prepare(const WorkerEnv& env,
                                            std::chrono::milliseconds timeout);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // After the rendezvous, before the backend connects: one store key with this rank's endpoint.
  void publish(c10d::Store& store);
  // Once the backend is connected (so every rank has published): reads the endpoints of the
  // next few ranks on the ring and starts the heartbeat thread.
  void start(c10d::Store& store, std::shared_ptr<Monitor> monitor);

  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  // Set with the first verdict: backends that poll (NCCL) abort on it.
  std::shared_ptr<const std::atomic<bool>> abort_flag() const { return abort_flag_; }
  // kPeerLost naming every rank lost so far, how each was seen and its last collective.
  Error error() const;
  // Waits up to `within` for a verdict (a backend failure often comes a moment before it).
  bool wait_lost(std::chrono::milliseconds within) const;

 private:
  PeerWatch(const WorkerEnv& env, std::chrono::milliseconds timeout);
  void on_verdict(const heartbeat::Verdict& v);
  void abort_connections();

  WorkerEnv env_;
  std::chrono::milliseconds timeout_;
  std::string host_;
  std::unique_ptr<heartbeat::Listener> listener_;
  std::set<std::pair<int, unsigned long>> sockets_before_;  // (fd, inode)
  std::set<std::pair<int, unsigned long>> runtime_sockets_;
  std::vector<std::string> hosts_;  // by rank, where known ("" otherwise)
  std::shared_ptr<Monitor> monitor_;
  std::atomic<bool> lost_{false};
  std::shared_ptr<std::atomic<bool>> abort_flag_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<std::chrono::steady_clock::time_point> first_verdict_at_{};
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;  // one per lost rank
  std::unique_ptr<heartbeat::Node> node_;
};

}  // namespace dtlaunch::ddp::detail
