// Rank 0's one line after init: how long the rendezvous took and who came last (always with
// DTLAUNCH_DDP_TIMELINE=1, else only when rank 0 waited over a second). Not installed.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// Timestamps of init_process_group's phases on this rank.
struct StartupPhases {
  std::chrono::steady_clock::time_point start, env_read, store_connected, all_checked_in,
      backend_ready;
  // How long rank 0 waited for the others after it checked in itself.
  std::chrono::milliseconds rank0_waited{0};
};

// The line, from every rank's check-in record in `store`; "" when there is nothing to say.
std::string startup_line(const WorkerEnv& env, c10d::Store& store, bool timeline,
                         const StartupPhases& phases);

}  // namespace dtlaunch::ddp::detail
