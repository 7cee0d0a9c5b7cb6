// Slurm's environment of one task, read once (by read_inputs, launch/inputs.hpp) and
// cross-checked. Nothing is derived here beyond parsing: spec_from_slurm (launch/build_spec.hpp)
// makes the decisions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "launch/spec.hpp"

namespace dtlaunch::launch {

enum class SlurmContext {
  kNone,            // not in a Slurm job at all
  kStep,            // inside an srun step: SLURM_STEP_ID is set
  kJobWithoutStep,  // in a batch script or salloc shell, outside any step
};
SlurmContext detect_slurm(const core::EnvMap& env);

struct SlurmStep {
  std::uint32_t procid = 0;   // global rank
  std::uint32_t localid = 0;  // rank on this node
  std::uint32_t nodeid = 0;   // this node's index in `hosts`
  std::uint32_t ntasks = 0;   // tasks in the step
  std::uint32_t nnodes = 0;
  std::vector<std::string> hosts;             // expanded node list, in Slurm's order
  std::vector<std::uint32_t> tasks_per_node;  // one count per host
  std::uint64_t job_id = 0;
  std::uint64_t step_id = 0;
  std::uint64_t het_offset = 0;                // SLURM_HET_JOB_OFFSET, 0 outside het jobs
  std::string distribution;                    // SLURM_DISTRIBUTION, may be empty
  std::optional<std::string> hostfile;         // SLURM_HOSTFILE
  std::optional<std::string> cpus_per_task;    // SLURM_CPUS_PER_TASK, validated
  std::optional<std::uint32_t> gpus_per_task;  // SLURM_GPUS_PER_TASK
  std::vector<Note> notes;                     // which fallbacks were used
};

// Reads and cross-checks the step. Throws Error (exit 2) naming the variable and its value for
// anything missing, unparsable or inconsistent, and for a job context without a step (a batch
// script that runs dtlaunch without srun: rank 0 would wait forever for ranks that never start).
SlurmStep read_slurm_step(const core::EnvMap& env);

}  // namespace dtlaunch::launch
