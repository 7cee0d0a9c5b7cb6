// `dtlaunch --watch` on the Slurm path: the heartbeat between the tasks' launchers around
// proc/watch.hpp's parent. The endpoints need a rendezvous before the program's: lib/cli has the
// preflight's check-in at MASTER_ADDR:MASTER_PORT relay them (doctor/wire.hpp's Relay), which is
// closed again before the program starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/hmac.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch::heartbeat {
class Listener;
}  // namespace dtlaunch::heartbeat

namespace dtlaunch::watch {

// Whose heartbeat endpoints `rank` of a job of `world` ranks needs: the next ranks on the ring,
// as many as it may skip lost in a row (heartbeat::kEndpointWindow). O(1) per task.
std::vector<std::uint32_t> ring_successors(std::uint32_t rank, std::uint32_t world);

class WatchJoin {
 public:
  // Opens this task's heartbeat endpoint (a port the kernel picks, every interface).
  // Throws Error::system.
  WatchJoin(const std::string& master_addr, std::uint32_t rank, std::uint32_t world);
  ~WatchJoin();
  WatchJoin(const WatchJoin&) = delete;
  WatchJoin& operator=(const WatchJoin&) = delete;

  // "ADDRESS PORT HOST", for the check-in.
  const std::string& endpoint() const { return endpoint_; }
  // The endpoints of ring_successors(rank), as the check-in handed them back.
  std::map<std::uint32_t, std::string>& ring() { return ring_; }

  // Starts the heartbeat and the program, waits (proc/watch.hpp). `tag`: the job's identity;
  // `key`: its secret (DTLAUNCH_JOB_KEY), which seals the heartbeat's frames.
  int run(const proc::WorkerProcess& program, std::chrono::milliseconds timeout,
          std::chrono::milliseconds grace, std::uint64_t tag, std::optional<core::JobKey> key);

 private:
  std::unique_ptr<heartbeat::Listener> listener_;
  std::string endpoint_, host_;
  std::uint32_t rank_, world_;
  std::map<std::uint32_t, std::string> ring_;
};

}  // namespace dtlaunch::watch
