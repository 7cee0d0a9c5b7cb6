// What the user asked for on the command line, before anything is derived. apps/ fill it with
// CLI11; lib/ turns it and the environment snapshot into a LaunchSpec.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "affinity/plan.hpp"
#include "core/names.hpp"

namespace dtlaunch::launch {

enum class Mode { kAuto, kSlurm, kLocal };
enum class GpuBind {
  kShare,    // keep every GPU visible; export this rank's index within the visible list
  kIsolate,  // narrow CUDA_VISIBLE_DEVICES to this rank's one device
  kNone,     // bind nothing: export no device index, leave CUDA_VISIBLE_DEVICES alone
};

// --mode's and --gpu-bind's words.
inline constexpr core::Named<Mode> kModeNames[] = {
    {Mode::kAuto, "auto"}, {Mode::kSlurm, "slurm"}, {Mode::kLocal, "local"}};
inline constexpr core::Named<GpuBind> kGpuBindNames[] = {
    {GpuBind::kShare, "share"}, {GpuBind::kIsolate, "isolate"}, {GpuBind::kNone, "none"}};

struct LaunchOptions {
  Mode mode = Mode::kAuto;
  std::optional<std::string> master_addr;
  std::optional<std::uint16_t> master_port;
  GpuBind gpu_bind = GpuBind::kShare;
  std::optional<std::uint32_t> gpus_per_node;  // overrides the count of visible devices
  bool allow_gpu_sharing = false;              // several local ranks on one GPU
  bool export_run_id = false;                  // TORCHELASTIC_RUN_ID (Lightning reads it)
  std::optional<std::string> run_id;
  // --job-node I/N: this Slurm step is node I of a job of N nodes, each its own step of the same
  // number of tasks (`dtlaunch job --live` runs one step per node, so that a lost node's step can
  // be ended and started again elsewhere alone). Ranks I*T.. for the step's T tasks.
  std::optional<std::string> job_node;
  std::optional<std::string> port_range;      // "LO-HI"; also DTLAUNCH_PORT_RANGE
  std::optional<affinity::CpuBind> cpu_bind;  // also DTLAUNCH_CPU_BIND; default none
  // also DTLAUNCH_MEM_BIND; default local when binding CPUs
  std::optional<affinity::MemBind> mem_bind;

  // Local mode (no Slurm step): one launcher per node spawns nproc_per_node workers.
  std::optional<std::uint32_t> nproc_per_node;
  std::optional<std::uint32_t> nnodes;
  std::optional<std::uint32_t> node_rank;
  std::uint32_t max_restarts = 0;
  std::optional<std::chrono::milliseconds> grace;  // default: proc::kDefaultGrace
  std::optional<std::string> log_dir;

  std::vector<std::string> argv;  // the program and its arguments, untouched
  bool program_optional = false;  // `dtlaunch doctor` may check a job without a program
};

}  // namespace dtlaunch::launch
