// This rank's clock against rank 0's, measured through the store after init (an NTP-like
// exchange: rank 0's clock read between this rank's send and receive), so that `dtlaunch trace`
// lines the ranks' flight records up. Not installed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// offset_us added to this rank's wall clock gives rank 0's; the truth lies within error_us (half
// the round trip).
struct ClockAlignment {
  std::atomic<bool> known{false};
  std::atomic<int64_t> offset_us{0};
  std::atomic<int64_t> error_us{0};
};

// Rank 0 serves every other rank in turn; another rank measures itself. On a thread and a store
// connection of the caller's own, so that init and training do not wait for it. Leaves `clock`
// unknown when the store fails.
void align_clock(WorkerEnv env, std::shared_ptr<ClockAlignment> clock);

}  // namespace dtlaunch::ddp::detail
