// The validated blueprint of a launch. Everything in it was checked while it was built, so the
// code that acts on it (exec in a Slurm step, spawn + supervise in local mode) has nothing left
// to decide: Slurm env -> LaunchSpec -> worker environment -> exec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/options.hpp"

namespace dtlaunch::launch {

// A decision worth telling the user, produced by pure code and logged by the shell around it.
struct Note {
  enum class Level { kDebug, kInfo, kWarn };
  Level level = Level::kDebug;
  bool rank0_only = false;  // said once per job (by global rank 0), not once per task
  std::string text;
};

struct Rendezvous {
  std::string addr;
  std::uint16_t port = 0;
};

struct GpuPlan {
  // Device ids exactly as the environment names them (indices, UUIDs, MIG ids), in order.
  // Empty: this node has no GPU for us, and nothing is bound.
  std::vector<std::string> visible;
  bool from_cuda_visible_devices = false;  // else counted (device files or --gpus-per-node)
  GpuBind bind = GpuBind::kShare;
  bool allow_sharing = false;
  // Slurm gave each task its own GPU(s) (--gpus-per-task): index 0 of what this task sees.
  bool isolated_by_slurm = false;
  // Where `visible` came from, for messages: "CUDA_VISIBLE_DEVICES='3,5' narrowed by ...".
  std::string counted_from;
  // Who sets the ranks per node, for the advice when there are too few GPUs: Slurm's options
  // under Slurm, --nproc-per-node in local mode.
  Mode mode = Mode::kSlurm;
};

// --cpu-bind / --mem-bind: the binding of each local rank this launcher starts (under Slurm
// only the task's own), applied just before exec.
struct AffinityPlan {
  affinity::CpuBind cpu = affinity::CpuBind::kNone;
  affinity::MemBind mem = affinity::MemBind::kNone;
  std::vector<std::optional<affinity::Binding>> by_local_rank;  // empty when nothing is bound
  bool export_device_order = false;  // CUDA_DEVICE_ORDER=PCI_BUS_ID (it was unset)
  const affinity::Binding* of(std::uint32_t local_rank) const {
    return local_rank < by_local_rank.size() && by_local_rank[local_rank]
               ? &*by_local_rank[local_rank]
               : nullptr;
  }
};

struct LaunchSpec {
  Mode mode = Mode::kSlurm;
  std::uint32_t world_size = 1;
  std::uint32_t nnodes = 1;
  std::uint32_t node_rank = 0;
  std::uint32_t local_world_size = 1;    // tasks on this node
  // rank = first_rank_on_node + local rank (local mode) or + SLURM_PROCID (Slurm; not 0 only
  // with --job-node)
  std::uint32_t first_rank_on_node = 0;
  Rendezvous master;
  GpuPlan gpu;
  AffinityPlan affinity;
  std::optional<std::string> omp_num_threads;  // set only where the user has not
  std::uint32_t max_restarts = 0;
  std::optional<std::string> torchelastic_run_id;  // exported as TORCHELASTIC_RUN_ID when present
  // Exported as DTLAUNCH_RUN_ID: what the DDP runtime compares at check-in, so that a rank of
  // another job that reaches the same MASTER_ADDR:MASTER_PORT is refused instead of joining.
  // "slurm-JOB.STEP[+HET]" under Slurm, "local-<supervisor tag>" for a standalone local launch,
  // "local-<--run-id>" for several local launchers; unset (and removed) when nothing names the
  // run (several local launchers without --run-id).
  std::optional<std::string> dtlaunch_run_id;
  // Local mode: this dtlaunch's identity (supervisor_tag()), exported as DTLAUNCH_SUPERVISOR.
  std::optional<std::string> supervisor_tag;
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::string program_path;       // argv[0] resolved through PATH, known executable
  std::vector<Note> notes;
};

// One worker of the launch: a task under Slurm, a child process in local mode.
struct WorkerInfo {
  WorkerInfo() = default;
  WorkerInfo(std::uint32_t rank_, std::uint32_t local_rank_, std::uint32_t restart_count_,
             std::optional<std::string> job_key_ = std::nullopt)
      : rank(rank_),
        local_rank(local_rank_),
        restart_count(restart_count_),
        job_key(std::move(job_key_)) {}
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  std::uint32_t restart_count = 0;
  // Local mode: the attempt's secret (DTLAUNCH_JOB_KEY, 64 hex digits), fresh per attempt.
  std::optional<std::string> job_key;
};

}  // namespace dtlaunch::launch
