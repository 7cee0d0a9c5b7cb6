#include "launch/plan.hpp"

#include "contract/settings.hpp"
#include "core/hmac.hpp"
#include "core/parse.hpp"
#include "launch/build_spec.hpp"
#include "launch/worker_env.hpp"

namespace dtlaunch::launch {

namespace {

PlannedWorker planned(const LaunchSpec& spec, const WorkerInfo& worker, const core::EnvMap& env) {
  PlannedWorker p;
  p.rank = worker.rank;
  p.local_rank = worker.local_rank;
  if (const affinity::Binding* b = spec.affinity.of(worker.local_rank)) p.binding = *b;
  p.contract = worker_contract(spec, worker);
  p.changes = contract::to_env(p.contract, env);
  p.env = contract::apply_env(env, p.changes);
  return p;
}

// Under Slurm the restarts are counted by `dtlaunch job` (docs/resilience.md), which runs each
// attempt as a new step and says which one it is.
std::uint32_t slurm_restart_count(const LaunchInputs& inputs) {
  if (!inputs.restart_count) return 0;
  return static_cast<std::uint32_t>(core::parse_count(contract::setting::kRestartCount.name,
                                                      *inputs.restart_count, 0, UINT32_MAX));
}

}  // namespace

LaunchPlan plan(const LaunchOptions& options, const core::EnvMap& env, const System& system) {
  LaunchPlan p;
  p.mode = resolve_mode(options, detect_slurm(env));
  p.inputs = read_inputs(env, p.mode);
  if (p.mode == Mode::kSlurm) {
    p.spec = spec_from_slurm(p.inputs, options, system);
    const std::uint32_t rank = p.spec.first_rank_on_node + p.inputs.step->procid;
    p.who = "rank " + std::to_string(rank);
    p.speaks_for_job = rank == 0;
  } else {
    p.spec = spec_from_local(p.inputs, options, system);
    p.spec.supervisor_tag = system.random_tag();
    // Standalone, the supervisor's own tag names the run (several launchers need --run-id).
    if (!p.spec.dtlaunch_run_id && p.spec.nnodes == 1)
      p.spec.dtlaunch_run_id = "local-" + *p.spec.supervisor_tag;
    p.descendant_marker = contract::supervisor_marker(*p.spec.supervisor_tag);
    p.who = "node " + std::to_string(p.spec.node_rank);
    p.speaks_for_job = p.spec.node_rank == 0;
  }
  p.workers = plan_workers(p, env, p.mode == Mode::kSlurm ? slurm_restart_count(p.inputs) : 0,
                           core::to_hex(core::make_job_key()));
  return p;
}

std::vector<PlannedWorker> plan_workers(const LaunchPlan& plan, const core::EnvMap& env,
                                        std::uint32_t restart_count, const std::string& job_key) {
  const LaunchSpec& spec = plan.spec;
  if (plan.mode == Mode::kSlurm) {
    const SlurmStep& step = *plan.inputs.step;
    return {planned(spec, {spec.first_rank_on_node + step.procid, step.localid, restart_count},
                    env)};
  }
  // Several launchers (--nnodes > 1) cannot agree on a key they each make: the inherited one
  // stands there (the sbatch templates and dtlaunch job export one), docs/security.md.
  std::optional<std::string> key;
  if (spec.nnodes == 1) key = job_key;
  std::vector<PlannedWorker> workers;
  for (std::uint32_t local = 0; local < spec.local_world_size; ++local)
    workers.push_back(
        planned(spec, {spec.first_rank_on_node + local, local, restart_count, key}, env));
  return workers;
}

}  // namespace dtlaunch::launch
