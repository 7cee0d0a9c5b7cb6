// The one planning function: from what the user asked and the environment to everything a
// launch will do, decided before anything starts. run_launch (lib/cli) logs the plan's notes,
// then prints it (--dry-run), execs its one worker (Slurm) or supervises its workers (local mode).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "affinity/plan.hpp"
#include "contract/contract.hpp"
#include "core/env_map.hpp"
#include "launch/inputs.hpp"
#include "launch/options.hpp"
#include "launch/spec.hpp"
#include "launch/system.hpp"

namespace dtlaunch::launch {

// One worker as the plan decided it: what --dry-run prints (launch/render.hpp), what the doctor
// reports, and what is exec'd or spawned.
struct PlannedWorker {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  contract::EnvDelta changes;                // to_env(contract, the inherited environment)
  std::optional<affinity::Binding> binding;  // --cpu-bind / --mem-bind, when on
  contract::WorkerContract contract;  // what the worker is told (worker_contract), for the doctor
  // The program's whole environment: the inherited one with `changes` applied, computed here
  // once so that what is exec'd and what the doctor probes cannot differ.
  core::EnvMap env{};
};

struct LaunchPlan {
  Mode mode = Mode::kSlurm;  // never kAuto
  LaunchSpec spec;           // program_path, argv, master, notes, ...
  // What the decisions read from the environment, read once: the Slurm step (under Slurm, and
  // in local mode inside an srun step), the user's MASTER_*, CUDA_VISIBLE_DEVICES, ...
  LaunchInputs inputs;
  // The first attempt's workers: this task under Slurm, every local rank in local mode.
  std::vector<PlannedWorker> workers;
  // Who this launcher is in its log lines ("rank 3" under Slurm, "node 0" in local mode), and
  // whether it says the notes meant to be said once per job (rank 0, node 0).
  std::string who;
  bool speaks_for_job = false;
  // Local mode: how the guardian recognises the workers' descendants, "DTLAUNCH_SUPERVISOR=<tag>",
  // from the same spec.supervisor_tag that the workers' contract carries.
  std::optional<std::string> descendant_marker;
};

// Throws Error for anything wrong, before anything was started. The system supplies the machine's
// facts, the free port of a standalone launch without --master-port and the supervisor's tag.
LaunchPlan plan(const LaunchOptions& options, const core::EnvMap& env, const System& system);

// The workers of one attempt: restart_count 0 is plan().workers; local mode's restarts ask again.
// `job_key` (64 hex digits) is the attempt's secret in standalone local mode; under Slurm and
// with --nnodes > 1 the inherited one stands.
std::vector<PlannedWorker> plan_workers(const LaunchPlan& plan, const core::EnvMap& env,
                                        std::uint32_t restart_count, const std::string& job_key);

}  // namespace dtlaunch::launch
