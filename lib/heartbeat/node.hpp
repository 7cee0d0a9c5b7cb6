// The heartbeat's I/O shell: one thread that listens on a small TCP endpoint of its own, keeps a
// connection to the watched rank (its ring successor) and accepts its predecessor's, sends a
// sealed heartbeat on each every interval, probes a silent rank with a fresh connect(), and
// floods verdicts; the decisions are the pure core's (ring.hpp). The thread never waits for
// anything but poll(), so a busy or blocked caller never delays a heartbeat.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "heartbeat/gate.hpp"
#include "heartbeat/ring.hpp"
#include "heartbeat/wire.hpp"

namespace dtlaunch::heartbeat {

// Where a rank's heartbeat listens, and the host name its messages use.
struct Endpoint {
  std::string address;  // numeric IPv4/IPv6 or a name to resolve
  uint16_t port = 0;
  std::string host;  // for messages: the node's short name
};
// "ADDRESS PORT HOST", one line, as published through a store or an exchange.
std::string format_endpoint(const Endpoint& e);
// Throws std::invalid_argument on a malformed record.
Endpoint parse_endpoint(const std::string& text);

// A listening socket on a port the kernel picks (close-on-exec), bound to `address` (numeric, the
// one this rank publishes: the job's traffic goes there, docs/security.md); on every interface
// when `address` is empty or cannot be bound.
class Listener {
 public:
  // Throws std::system_error.
  explicit Listener(const std::string& address = "");
  ~Listener();
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&&) = delete;
  Listener(const Listener&) = delete;
  int fd() const noexcept { return fd_; }
  uint16_t port() const noexcept { return port_; }
  int release() noexcept;

 private:
  void bind_any();
  int fd_ = -1;
  uint16_t port_ = 0;
};

// The local address this host uses to reach `peer` (a name or address): what to publish so that
// the other ranks reach this one on the same network. "" when the route is unknown.
std::string local_address_towards(const std::string& peer);

struct NodeOptions {
  int self = 0;
  int world = 1;
  Settings settings;
  uint64_t tag = 0;  // the job's identity; connections carrying another are refused
  // The job's secret (DTLAUNCH_JOB_KEY): every frame is sealed with it and one that is not is
  // refused. None: frames are only checked for their shape and tag (docs/security.md).
  Key key;
  // Endpoints known to this rank, by rank: at least its successor's, better the next few.
  // A rank whose endpoint is unknown is not watched (it counts as heard) until add_endpoints()
  // brings it: a rank that has not started yet is the start-up's business, not a loss.
  std::map<int, Endpoint> endpoints;
  // This rank's position, sent with each heartbeat; called on the heartbeat thread.
  std::function<Position()> position;
  // Each verdict, once, on the heartbeat thread, as soon as it is known here.
  std::function<void(const Verdict&)> on_verdict;
};

class Node {
 public:
  // Starts the thread; the listener must stay the one whose endpoint was published.
  Node(NodeOptions options, Listener listener);
  // Says goodbye to the neighbours (an orderly end: no verdict) and joins the thread.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Stops without goodbye (the neighbours then see this rank exit). Idempotent.
  void stop(bool say_goodbye = true);
  std::vector<Verdict> verdicts() const;
  bool any_lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  // The frames and connections refused so far (docs/security.md). Thread-safe.
  Refused refused() const;
  // Frames sent and received so far (for the benchmarks).
  uint64_t frames_sent() const noexcept { return sent_.load(std::memory_order_relaxed); }
  // More endpoints, as they become known (a rank publishes its own once it has started): the
  // thread watches a successor as soon as its endpoint arrives. Thread-safe.
  void add_endpoints(const std::map<int, Endpoint>& more);
  // The heartbeat's own descriptors (listener, links, probe), as they were when the thread last
  // handed out a verdict: an on_verdict callback uses it to spare them when it shuts down the
  // process's other sockets. Thread-safe.
  std::vector<int> own_sockets() const;

 private:
  class Loop;  // the thread's state and its steps (node.cpp)
  void run();
  void wake();

  NodeOptions options_;
  int listen_fd_;
  int wake_read_ = -1, wake_write_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> goodbye_{true};
  std::atomic<bool> lost_{false};
  std::atomic<uint64_t> sent_{0};
  mutable std::mutex mutex_;
  std::vector<Verdict> verdicts_;
  std::map<int, Endpoint> new_endpoints_;  // from add_endpoints(), not yet taken by the thread
  std::vector<int> own_sockets_;
  Refused refused_;
  std::thread thread_;
};

}  // namespace dtlaunch::heartbeat
