#include "launch/plan.hpp"

#include "launch/build_spec.hpp"
#include "launch/worker_env.hpp"

namespace dtlaunch {

namespace {

PlannedWorker planned(const LaunchSpec& spec, const WorkerInfo& worker, const EnvMap& env) {
  std::optional<Binding> binding;
  if (const Binding* b = spec.affinity.of(worker.local_rank)) binding = *b;
  return {worker.rank, worker.local_rank, build_worker_env(spec, worker, env), binding};
}

}  // namespace

LaunchPlan plan(const LaunchOptions& options, const EnvMap& env, const System& system) {
  LaunchPlan p;
  p.mode = resolve_mode(options, env);
  if (p.mode == Mode::kSlurm) {
    p.step = read_slurm_step(env);
    p.spec = spec_from_slurm(*p.step, options, env, system);
    p.who = "rank " + std::to_string(p.step->procid);
    p.speaks_for_job = p.step->procid == 0;
  } else {
    p.spec = spec_from_local(options, env, system, [&] { return system.free_port("127.0.0.1"); });
    p.spec.supervisor_tag = system.random_tag();
    // Standalone, the supervisor's own tag names the run (several launchers need --run-id).
    if (!p.spec.run_identity && p.spec.nnodes == 1)
      p.spec.run_identity = "local-" + *p.spec.supervisor_tag;
    p.descendant_marker = supervisor_marker(*p.spec.supervisor_tag);
    p.who = "node " + std::to_string(p.spec.node_rank);
    p.speaks_for_job = p.spec.node_rank == 0;
  }
  p.workers = plan_workers(p, env, 0);
  return p;
}

std::vector<PlannedWorker> plan_workers(const LaunchPlan& plan, const EnvMap& env,
                                        std::uint32_t restart_count) {
  const LaunchSpec& spec = plan.spec;
  if (plan.step)
    return {planned(spec, {plan.step->procid, plan.step->localid, restart_count}, env)};
  std::vector<PlannedWorker> workers;
  for (std::uint32_t local = 0; local < spec.local_world_size; ++local)
    workers.push_back(planned(spec, {spec.first_rank_on_node + local, local, restart_count}, env));
  return workers;
}

}  // namespace dtlaunch
