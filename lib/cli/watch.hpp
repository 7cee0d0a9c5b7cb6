// `dtlaunch --watch` on the Slurm path: the heartbeat between the tasks' launchers around
// proc/watch.hpp's parent. The endpoints travel through the preflight's check-in at
// MASTER_ADDR:MASTER_PORT (doctor/probe.hpp), which is closed again before the program starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "proc/supervisor.hpp"

namespace dtlaunch::heartbeat {
class Listener;
}  // namespace dtlaunch::heartbeat

namespace dtlaunch::cli {

class WatchJoin {
 public:
  // Opens this task's heartbeat endpoint (a port the kernel picks, every interface).
  // Throws Error::system.
  WatchJoin(const std::string& master_addr, std::uint32_t rank, std::uint32_t world);
  ~WatchJoin();
  WatchJoin(const WatchJoin&) = delete;
  WatchJoin& operator=(const WatchJoin&) = delete;

  // "ADDRESS PORT HOST", for the check-in report.
  const std::string& endpoint() const { return endpoint_; }
  // The successors' endpoints, as rank 0 handed them back.
  std::map<std::uint32_t, std::string>& ring() { return ring_; }

  // Starts the heartbeat and the program, waits (proc/watch.hpp). `tag`: the job's identity.
  int run(const proc::WorkerProcess& program, std::chrono::milliseconds timeout,
          std::chrono::milliseconds grace, std::uint64_t tag);

 private:
  std::unique_ptr<heartbeat::Listener> listener_;
  std::string endpoint_, host_;
  std::uint32_t rank_, world_;
  std::map<std::uint32_t, std::string> ring_;
};

}  // namespace dtlaunch::cli
