// The network test's agent (`dtlaunch doctor --network`): the sockets and threads of one node's
// tests of its peers and of its answers to theirs. What it measures is judged by network.hpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "doctor/network.hpp"
#include "doctor/wire.hpp"

namespace dtlaunch::doctor {

// A node's test agent: listens on an ephemeral port of every interface from start() (before the
// check-in, so the port goes into the report) and answers other nodes' tests from its own thread
// until it is destroyed; run() makes this node's own tests.
class NetworkAgent {
 public:
  static std::unique_ptr<NetworkAgent> start();  // nullptr when no port could be opened
  ~NetworkAgent();
  NetworkAgent(const NetworkAgent&) = delete;
  NetworkAgent& operator=(const NetworkAgent&) = delete;

  std::uint16_t port() const { return port_; }
  // Tests the plan's peers one after the other, each within its slot, all within `end`.
  std::vector<LinkResult> run(const NetworkPlan& plan, Clock::time_point end) const;

 private:
  NetworkAgent(int listener, std::uint16_t port);
  void serve();
  void answer(int fd);

  int listener_;
  std::uint16_t port_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::vector<int> open_;  // connections being answered, shut down on destruction
  std::vector<std::thread> answering_;
  std::thread server_;
};

}  // namespace dtlaunch::doctor
