// A whole ring of heartbeat cores in one process on simulated time: the network is an event
// queue with a fixed latency, faults are injected at chosen times. The unit tests check the
// core's corner cases with it, and bench/heartbeat measures messages and detection time for
// thousands of ranks with it. The sockets are the shell's (node.cpp), tested on its own.
#pragma once

#include <cstdint>
#include <vector>

#include "heartbeat/ring.hpp"

namespace dtlaunch::heartbeat {

// kResume: a frozen rank runs again (SIGCONT) and reads what was sent to it meanwhile.
enum class Fault : uint8_t { kNone, kExit, kFreeze, kPartition, kResume };

struct SimulationSetup {
  int world = 4;
  Settings settings;
  std::chrono::microseconds latency{1000};  // one way, every message
  struct Injection {
    int rank;
    Fault fault;
    milliseconds at;
  };
  std::vector<Injection> faults;
  milliseconds duration{30000};  // simulated
};

struct SimulationResult {
  // verdicts[r]: what rank r learnt, in order (empty for a faulty rank).
  std::vector<std::vector<Verdict>> verdicts;
  // When each rank learnt of its first verdict, since the first fault (-1: never).
  std::vector<int64_t> first_verdict_ms;
  // When each rank learnt of its latest verdict, since the first fault (-1: never).
  std::vector<int64_t> all_verdicts_ms;
  uint64_t messages = 0;             // heartbeats and verdicts delivered or lost
  uint64_t max_received_by_one = 0;  // the busiest rank's received messages
  uint64_t events = 0;               // simulation events processed (for its own speed)
};

SimulationResult simulate(const SimulationSetup& setup);

}  // namespace dtlaunch::heartbeat
