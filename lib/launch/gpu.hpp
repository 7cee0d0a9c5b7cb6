// Which GPU a local rank uses. Pure: the visible list comes from the environment or a count made
// by the I/O shell (launch/system.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "contract/settings.hpp"
#include "launch/spec.hpp"

namespace dtlaunch::launch {

// CUDA_VISIBLE_DEVICES as a list of device ids. "" and "NoDevFiles" (what Slurm sets for a step
// without GPUs) mean no device; an empty or negative entry ends the list, as it does for CUDA
// ("-1" hides all devices). An entry that is none of an index, GPU-<uuid> or MIG-<id> ("a,b")
// is an error naming `source`: CUDA would silently see no device from it on.
std::vector<std::string> parse_visible_devices(
    std::string_view text, std::string_view source = contract::setting::kCudaVisibleDevices.name);

struct DeviceChoice {
  std::uint32_t index = 0;  // within GpuPlan::visible: what cudaSetDevice needs in share mode
  std::string id;           // the device id itself, for --gpu-bind=isolate
};

// The device of one local rank, or nullopt when the plan binds nothing (no GPU, or kNone).
// Throws Error (bad input) when there are fewer devices than local ranks and sharing is off.
std::optional<DeviceChoice> choose_device(const GpuPlan& plan, std::uint32_t local_rank,
                                          std::uint32_t local_world_size);

// The checks choose_device would make for every local rank, done once while building the spec,
// plus the notes a user should see (the NVLink warning for per-task isolation).
void check_gpu_plan(const GpuPlan& plan, std::uint32_t local_world_size, std::vector<Note>& notes);

}  // namespace dtlaunch::launch
