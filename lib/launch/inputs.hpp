// Everything the launch decisions read from the environment, read in one place. The decisions
// (spec_from_slurm, spec_from_local, locate_gpus) take a LaunchInputs and never the EnvMap, so
// that each variable has one reader and a new one is added here, next to the others. The
// environment as a whole still travels to the workers (to_env's `inherited`), untouched.
#pragma once

#include <optional>
#include <string>

#include "core/env_map.hpp"
#include "launch/options.hpp"
#include "launch/slurm_step.hpp"

namespace dtlaunch::launch {

struct LaunchInputs {
  SlurmContext slurm = SlurmContext::kNone;
  // Read and cross-checked under Slurm, and in local mode inside an srun step (one launcher per
  // node takes the nodes from Slurm).
  std::optional<SlurmStep> step;

  // Kept as text and parsed where they are decided, so that an option given on the command line
  // replaces a malformed variable instead of failing on it.
  std::optional<std::string> master_addr;  // MASTER_ADDR
  std::optional<std::string> master_port;  // MASTER_PORT
  std::optional<std::string> port_range;   // DTLAUNCH_PORT_RANGE
  std::optional<std::string> cpu_bind;     // DTLAUNCH_CPU_BIND
  std::optional<std::string> mem_bind;     // DTLAUNCH_MEM_BIND
  // CUDA reads an empty list as "no device": here, unlike every other variable, empty is set.
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::string> cuda_device_order;  // CUDA_DEVICE_ORDER
  std::optional<std::string> omp_num_threads;    // the user's, kept when set
  // Slurm's GPU allocation and CPU binding: read outside a step too, since a batch script's
  // local mode (`dtlaunch --nproc-per-node N` in the job) counts the job's GPUs.
  std::optional<std::string> slurm_step_gpus;      // SLURM_STEP_GPUS
  std::optional<std::string> slurm_job_gpus;       // SLURM_JOB_GPUS
  std::optional<std::string> slurm_cpu_bind_type;  // SLURM_CPU_BIND_TYPE
  std::string topology_root = "/";                 // DTLAUNCH_TOPOLOGY_ROOT (tests' fixtures)
  std::optional<std::string> path;                 // PATH, for the program's lookup
  // DTLAUNCH_RESTART_COUNT: under Slurm, the attempt that `dtlaunch job` runs.
  std::optional<std::string> restart_count;
};

// Under Slurm or with --nproc-per-node: the mode this launch runs in (never kAuto), from the
// options and the Slurm context. Refuses contradictions (--nproc-per-node with --mode slurm,
// local-mode options without --nproc-per-node, no Slurm step and no --nproc-per-node).
Mode resolve_mode(const LaunchOptions& options, SlurmContext slurm);

// Reads the inputs of a launch in `mode`. Throws Error (exit 2) for a Slurm step that is missing,
// incomplete or inconsistent (read_slurm_step); every other variable is checked where it is used.
LaunchInputs read_inputs(const core::EnvMap& env, Mode mode);

}  // namespace dtlaunch::launch
