// The heartbeat of the DDP runtime: each rank watches its ring successor on a small TCP
// endpoint of its own (lib/heartbeat), so that a rank that exits, freezes or drops off the
// network is named within DTLAUNCH_DDP_HEARTBEAT_TIMEOUT, whatever the collective timeout. On a
// verdict the group's connections are shut down, so that every pending Gloo collective fails at
// once and the process can exit, and every collective from then on throws kPeerLost with the
// verdict (docs/ddp.md, "Heartbeat"). Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "core/socket.hpp"
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

  // As soon as the store is known to be this job's, before this rank checks in: starts the
  // heartbeat thread, then publishes this rank's endpoint (one store key), so that a rank lost
  // from here on is named like a loss during training.
  void join(c10d::Store& store);
  // While the others arrive: reads the endpoints of the next few ranks on the ring that have
  // published theirs (one store request for the first one missing). With `all_published` (the
  // rendezvous is complete: every rank published before it checked in) it reads all of them.
  void fetch_endpoints(c10d::Store& store, bool all_published);
  // Once the backend is connected: the last collective of `monitor` goes with the heartbeats,
  // and the connections to shut down on a loss are those open now.
  void start(std::shared_ptr<Monitor> monitor);

  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  // Set with the first verdict: backends that poll (NCCL) abort on it.
  std::shared_ptr<const std::atomic<bool>> abort_flag() const { return abort_flag_; }
  // kPeerLost naming every rank lost so far, how each was seen and its last collective.
  Error error() const;
  // The ranks declared lost so far, this one included when the others declared it lost (it is
  // cut off from them), in the order of the verdicts; and when the first verdict came.
  std::vector<int> lost_ranks() const;
  std::chrono::steady_clock::time_point first_verdict_at() const {
    return first_verdict_at_.load();
  }
  // Waits up to `within` for a verdict (a backend failure often comes a moment before it).
  bool wait_lost(std::chrono::milliseconds within) const;
  // Start-up is over, returned or thrown: the backstop for a blocked start-up stands down.
  void startup_over();

 private:
  PeerWatch(const WorkerEnv& env, std::chrono::milliseconds timeout);
  void on_verdict(const heartbeat::Verdict& v);
  void abort_connections();
  void exit_if_startup_stays_blocked();
  void say_refused();
  std::set<core::OpenSocket> sockets_since_prepare() const;

  WorkerEnv env_;
  std::chrono::milliseconds timeout_;
  std::string host_;
  std::string address_;  // towards MASTER_ADDR; "" when unknown
  std::unique_ptr<heartbeat::Listener> listener_;
  int listener_fd_ = -1;
  std::set<core::OpenSocket> sockets_before_;
  // Once start()ed, the runtime's connections (and the heartbeat's, spared at the verdict);
  // until then they are found at the verdict.
  std::optional<std::set<core::OpenSocket>> runtime_sockets_;
  int fetched_ahead_ = 0;  // the next this many ranks' endpoints are known
  std::shared_ptr<Monitor> monitor_;
  std::atomic<Monitor*> monitor_for_position_{nullptr};
  std::atomic<bool> lost_{false};
  std::shared_ptr<std::atomic<bool>> abort_flag_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<std::chrono::steady_clock::time_point> first_verdict_at_{};
  mutable std::mutex mutex_;
  std::vector<std::string> hosts_;  // by rank, where known ("" otherwise)
  std::vector<std::string> lines_;  // one per lost rank
  std::vector<int> lost_ranks_;     // the ranks of lines_
  // Held while node_ is being set, so that a verdict at once waits for it.
  mutable std::mutex node_mutex_;
  std::unique_ptr<heartbeat::Node> node_;
  // A start-up blocked after a verdict with nothing left to shut down (Gloo on LibTorch 2.x
  // waits in its connect for a lost peer to dial in, for the whole timeout) is ended by this
  // thread, started with the first verdict during start-up.
  std::mutex startup_mutex_;
  std::condition_variable startup_done_;
  bool startup_over_ = false;
  std::thread backstop_;
};

}  // namespace dtlaunch::ddp::detail
