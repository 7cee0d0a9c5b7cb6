#include "launch/gpu.hpp"

#include <string>

#include "core/error.hpp"
#include "core/text.hpp"

namespace dtlaunch::launch {

std::vector<std::string> parse_visible_devices(std::string_view text, std::string_view source) {
  std::vector<std::string> ids;
  if (text == "NoDevFiles") return ids;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view id = text.substr(pos, comma - pos);
    while (!id.empty() && id.front() == ' ') id.remove_prefix(1);
    while (!id.empty() && id.back() == ' ') id.remove_suffix(1);
    // CUDA ignores everything from the first empty or negative entry on: "-1" is the usual way
    // to hide every device, so these end the list quietly.
    if (id.empty() || id.front() == '-') break;
    // Anything else CUDA cannot parse also ends its list, silently: "a,b" shows no GPU to CUDA,
    // and counting it as two would bind ranks to devices that do not exist.
    const bool index = id.find_first_not_of("0123456789") == std::string_view::npos;
    if (!index && !id.starts_with("GPU-") && !id.starts_with("MIG-"))
      throw core::Error::bad_env(
          source, text,
          "entry '" + core::excerpt(id) +
              "' is not a device index, GPU-<uuid> or MIG-<id>; CUDA would see no "
              "device from it on");
    ids.emplace_back(id);
    pos = comma + 1;
  }
  return ids;
}

namespace {
std::string too_few_message(const GpuPlan& plan, std::uint32_t local_world_size) {
  const std::string gpus = std::to_string(plan.visible.size());
  const std::string ranks = std::to_string(local_world_size);
  std::string text =
      gpus + " GPU(s) (" + plan.counted_from + ") for " + ranks + " ranks on this node: ";
  if (plan.mode == Mode::kLocal)
    return text + "pass --nproc-per-node " + gpus +
           " or fewer, or --allow-gpu-sharing to put several ranks on one GPU";
  return text + "ask Slurm for one GPU per task (--gpus-per-node=" + ranks +
         " or --gpus-per-task=1), or pass --allow-gpu-sharing to put several ranks on one GPU";
}
}  // namespace

void check_gpu_plan(const GpuPlan& plan, std::uint32_t local_world_size, std::vector<Note>& notes) {
  if (plan.bind == GpuBind::kNone) {
    notes.push_back({Note::Level::kDebug, false, "GPU binding off (--gpu-bind=none)"});
    return;
  }
  if (plan.visible.empty()) {
    notes.push_back({Note::Level::kDebug, false, "no GPU visible on this node: binding nothing"});
    return;
  }
  if (plan.isolated_by_slurm) {
    notes.push_back({Note::Level::kWarn, true,
                     "Slurm gave each task its own GPU (--gpus-per-task): NCCL cannot use CUDA "
                     "IPC/NVLink between isolated GPUs and falls back to slower paths; for "
                     "node-wide visibility ask for --gpus-per-node=N instead of --gpus-per-task"});
    return;
  }
  if (plan.visible.size() < local_world_size && !plan.allow_sharing)
    throw core::Error(core::ExitCode::kBadInput, too_few_message(plan, local_world_size));
}

std::optional<DeviceChoice> choose_device(const GpuPlan& plan, std::uint32_t local_rank,
                                          std::uint32_t local_world_size) {
  if (plan.bind == GpuBind::kNone || plan.visible.empty()) return std::nullopt;
  std::uint32_t index = 0;
  if (plan.isolated_by_slurm) {
    index = 0;  // Slurm already narrowed the list to this task's device(s)
  } else if (plan.visible.size() >= local_world_size) {
    index = local_rank;
  } else if (plan.allow_sharing) {
    index = static_cast<std::uint32_t>(local_rank % plan.visible.size());
  } else {
    throw core::Error(core::ExitCode::kBadInput, too_few_message(plan, local_world_size));
  }
  return DeviceChoice{index, plan.visible[index]};
}

}  // namespace dtlaunch::launch
