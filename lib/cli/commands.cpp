#include "cli/commands.hpp"

#include <ostream>
#include <string_view>

#include "affinity/apply.hpp"
#include "cli/log.hpp"
#include "core/error.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/build_spec.hpp"
#include "launch/contract.hpp"
#include "launch/exec.hpp"
#include "launch/render.hpp"
#include "launch/worker_env.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch {

namespace {

std::optional<Binding> binding_of(const LaunchSpec& spec, std::uint32_t local_rank) {
  if (const Binding* b = spec.affinity.of(local_rank)) return *b;
  return std::nullopt;
}

std::vector<PlannedWorker> plan_workers(const LaunchSpec& spec, const EnvMap& env,
                                        std::uint32_t restart_count, std::uint32_t slurm_rank,
                                        std::uint32_t slurm_local_rank) {
  std::vector<PlannedWorker> workers;
  if (spec.mode == Mode::kSlurm) {
    WorkerInfo self{slurm_rank, slurm_local_rank, restart_count};
    workers.push_back({self.rank, self.local_rank, build_worker_env(spec, self, env),
                       binding_of(spec, self.local_rank)});
    return workers;
  }
  for (std::uint32_t local = 0; local < spec.local_world_size; ++local) {
    WorkerInfo worker{spec.first_rank_on_node + local, local, restart_count};
    workers.push_back({worker.rank, worker.local_rank, build_worker_env(spec, worker, env),
                       binding_of(spec, worker.local_rank)});
  }
  return workers;
}

}  // namespace

int run_launch(const LaunchOptions& options, const RunFlags& flags, const EnvMap& env,
               std::ostream& out) {
  LiveSystem system;
  const Mode mode = resolve_mode(options, env);
  std::uint32_t rank = 0, local_rank = 0;
  LaunchSpec spec;
  if (mode == Mode::kSlurm) {
    SlurmStep step = read_slurm_step(env);
    rank = step.procid;
    local_rank = step.localid;
    spec = spec_from_slurm(step, options, env, system);
  } else {
    spec = spec_from_local(options, env, system, [] { return find_free_port("127.0.0.1"); });
    spec.supervisor_tag = supervisor_tag();
    if (!spec.run_identity && spec.nnodes == 1) spec.run_identity = "local-" + *spec.supervisor_tag;
  }
  const std::string who = mode == Mode::kSlurm ? "rank " + std::to_string(rank)
                                               : "node " + std::to_string(spec.node_rank);
  const bool speaks_for_job = mode == Mode::kSlurm ? rank == 0 : spec.node_rank == 0;

  std::vector<PlannedWorker> planned = plan_workers(spec, env, 0, rank, local_rank);
  log_notes(spec.notes, who, speaks_for_job, flags.verbose);
  if (flags.dry_run) {
    out << (flags.format == OutputFormat::kJson ? render_json(planned, spec.argv)
                                                : render_shell(planned, spec.argv));
    out.flush();
    return 0;
  }

  if (mode == Mode::kSlurm) {
    out.flush();
    // On dtlaunch itself: the program inherits both across exec, before its first allocation.
    if (const auto& binding = planned.front().binding)
      if (const int e = PreparedBinding(*binding).apply())
        throw Error::system("binding rank " + std::to_string(rank) + " to CPUs " +
                                binding->cpus.to_list() + " (sched_setaffinity, set_mempolicy)",
                            e);
    exec_program(spec.program_path, spec.argv, apply_env(env, planned.front().changes));
  }

  SupervisorOptions supervision;
  supervision.grace = options.grace;
  supervision.log_dir = options.log_dir;
  supervision.max_restarts = options.max_restarts;
  supervision.descendant_marker = std::string(kSupervisorVar) + "=" + *spec.supervisor_tag;
  auto make_workers = [&](std::uint32_t restart_count) {
    std::vector<WorkerProcess> processes;
    for (PlannedWorker& w : plan_workers(spec, env, restart_count, 0, 0))
      processes.push_back(
          {w.rank, w.local_rank, spec.program_path, spec.argv, apply_env(env, w.changes),
           w.binding ? std::make_shared<const PreparedBinding>(*w.binding) : nullptr});
    return processes;
  };
  out.flush();  // nothing of ours may come out after the workers' output
  RunResult result = run_workers(make_workers, supervision);
  return result.exit_status;
}

int run_hostnames(const std::vector<std::string>& expressions, std::ostream& out) {
  std::string text;  // everything is expanded before anything is printed
  for (const std::string& expr : expressions)
    hostlist::for_each_host(expr,
                            [&](std::string_view host) { text.append(host).push_back('\n'); });
  out << text;
  out.flush();
  return 0;
}

int run_hostlist(const std::vector<std::string>& names, std::ostream& out) {
  // Like scontrol, the arguments are read as one expression and ranges stay as written
  // ("1[2-3]" stays "1[2-3]"), but each argument must be valid on its own: "n[1-2" and "3]"
  // are two mistakes, not one range.
  std::string joined;
  for (const std::string& arg : names) {
    hostlist::count(arg);
    if (!joined.empty()) joined.push_back(',');
    joined += arg;
  }
  out << hostlist::recompress(joined) << '\n';
  out.flush();
  return 0;
}

int run_env_table(std::ostream& out) {
  out << "| variable | meaning | source |\n|---|---|---|\n";
  for (const ExportedVar& v : exported_vars())
    out << "| `" << v.name << "` | " << v.meaning << " | " << v.source << " |\n";
  out << "\nRemoved from the inherited environment when present:\n\n"
         "| variable | why |\n|---|---|\n";
  for (const RemovedVar& v : removed_vars()) out << "| `" << v.name << "` | " << v.why << " |\n";
  return 0;
}

}  // namespace dtlaunch
