// The runtime's own settings: every variable it reads besides the launch contract (WorkerEnv),
// read once, at init_process_group, through their declarations (contract/settings.hpp), so that
// a malformed one fails every rank at once, before the rendezvous. No other file of lib/ddp reads
// the environment.
#pragma once

#include <chrono>

#include "contract/settings.hpp"
#include "core/env_map.hpp"
#include "monitor.hpp"

namespace dtlaunch::ddp::detail {

struct RuntimeSettings {
  MonitorSettings monitor;
  bool shm_all_reduce =
      true;  // DTLAUNCH_DDP_SHM (InitOptions::shm_all_reduce can only turn it off)
  bool hier_all_reduce = true;                                    // DTLAUNCH_DDP_HIER
  bool live = false;                                              // DTLAUNCH_DDP_LIVE
  bool live_join = false;                                         // DTLAUNCH_DDP_LIVE_JOIN
  std::chrono::milliseconds live_wait{std::chrono::seconds(60)};  // DTLAUNCH_DDP_LIVE_WAIT

  // Throws Error(kConfig) with one line naming a malformed variable and quoting its value.
  static RuntimeSettings read(const core::EnvMap& env, int world_size);
  static RuntimeSettings from_environment(int world_size);
};

// Whether the process environment has `setting`, even empty: glibc reads its malloc tunables
// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) at start-up, before any settings value exists,
// and DistributedDataParallel leaves a tunable the user set alone.
bool set_in_environment(const contract::Setting& setting);

}  // namespace dtlaunch::ddp::detail
