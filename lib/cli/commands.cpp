#include "cli/commands.hpp"

#include <functional>
#include <iostream>
#include <memory>
#include <ostream>

#include "affinity/apply.hpp"
#include "cli/log.hpp"
#include "cli/watch.hpp"
#include "contract/contract.hpp"
#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "doctor/launch_check.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/plan.hpp"
#include "launch/render.hpp"
#include "launch/worker_env.hpp"
#include "proc/exec.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch {

namespace {

// A dry run supervises nothing: a fixed tag keeps its output the same from run to run.
class DryRunSystem final : public LiveSystem {
 public:
  std::string random_tag() const override { return "dry-run"; }
};

// The doctor's options from the command line's (lib/doctor builds and judges the reports).
doctor::LaunchCheckOptions check_options(const RunFlags& flags, WatchJoin* watch) {
  doctor::LaunchCheckOptions options;
  options.preflight = flags.check != Check::kDoctor;
  options.verbose = flags.verbose;
  options.json = flags.check_json;
  options.timeout = flags.check_timeout;
  options.network = {flags.check_network, flags.network_budget};
  if (watch) {
    options.heartbeat = watch->endpoint();
    options.ring = &watch->ring();
  }
  return options;
}

}  // namespace

int run_launch(const LaunchOptions& options, const RunFlags& flags, const EnvMap& env,
               std::ostream& out) {
  const LaunchPlan launch =
      flags.dry_run ? plan(options, env, DryRunSystem()) : plan(options, env, LiveSystem());
  const LaunchSpec& spec = launch.spec;
  log_notes(spec.notes, launch.who, launch.speaks_for_job, flags.verbose);
  // --watch under Slurm: the heartbeat endpoints go through the preflight's check-in, so
  // --watch implies --preflight.
  std::unique_ptr<WatchJoin> watch;
  RunFlags checked = flags;
  if (flags.watch && launch.mode != Mode::kSlurm)
    throw Error(ExitCode::kBadInput,
                "--watch is for the Slurm path (srun ... dtlaunch --watch PROGRAM); in local mode "
                "dtlaunch supervises its workers anyway");
  if (flags.watch && launch.mode == Mode::kSlurm && !flags.dry_run) {
    constexpr std::chrono::seconds kShortestWatchTimeout{3};
    if (flags.watch_timeout < kShortestWatchTimeout)
      throw Error(ExitCode::kBadInput, "--watch-timeout of " + duration_text(flags.watch_timeout) +
                                           ": below " + duration_text(kShortestWatchTimeout) +
                                           " a loaded node's heartbeat may be late (docs/cli.md)");
    watch =
        std::make_unique<WatchJoin>(spec.master.addr, launch.workers.front().rank, spec.world_size);
    if (checked.check == Check::kNone) checked.check = Check::kPreflight;
  }
  if (checked.check != Check::kNone && !flags.dry_run) {
    const int status = doctor::check_launch(launch, env, check_options(checked, watch.get()), out);
    if (flags.check == Check::kDoctor || status != 0) return status;
  }
  if (flags.dry_run) {
    out << (flags.format == OutputFormat::kJson ? render_json(launch.workers, spec.argv)
                                                : render_shell(launch.workers, spec.argv));
    out.flush();
    return 0;
  }

  if (launch.mode == Mode::kSlurm) {
    out.flush();
    // On dtlaunch itself: the program inherits both across exec, before its first allocation.
    const PlannedWorker& self = launch.workers.front();
    if (self.binding)
      if (const int e = PreparedBinding(*self.binding).apply())
        throw Error::system("binding rank " + std::to_string(self.rank) + " to CPUs " +
                                self.binding->cpus.to_list() +
                                " (sched_setaffinity, set_mempolicy)",
                            e);
    if (watch) {
      const WorkerProcess program{
          self.rank, self.local_rank, spec.program_path, spec.argv, apply_env(env, self.changes),
          nullptr};
      // The job's identity on the heartbeat's connections: MASTER_PORT is the job's own.
      const std::uint64_t tag =
          std::hash<std::string>{}(spec.master.addr + ":" + std::to_string(spec.master.port) + "/" +
                                   std::to_string(spec.world_size));
      return watch->run(program, flags.watch_timeout,
                        options.grace.value_or(std::chrono::seconds(30)), tag);
    }
    exec_program(spec.program_path, spec.argv, apply_env(env, self.changes));
  }

  SupervisorOptions supervision;
  if (options.grace) supervision.grace = *options.grace;
  supervision.log_dir = options.log_dir;
  supervision.max_restarts = options.max_restarts;
  supervision.descendant_marker = *launch.descendant_marker;
  auto make_workers = [&](std::uint32_t restart_count) {
    std::vector<WorkerProcess> processes;
    for (PlannedWorker& w : plan_workers(launch, env, restart_count))
      processes.push_back(
          {w.rank, w.local_rank, spec.program_path, spec.argv, apply_env(env, w.changes),
           w.binding ? std::make_shared<const PreparedBinding>(*w.binding) : nullptr});
    return processes;
  };
  out.flush();  // nothing of ours may come out after the workers' output
  return run_workers(make_workers, supervision).exit_status;
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
  // Then what is read, one table per owner, so that each docs page holds its owner's
  // (docs/environment.md the launcher's, doctor's and example's; docs/ddp.md the runtime's).
  for (Owner owner : {Owner::kLauncher, Owner::kDoctor, Owner::kRuntime, Owner::kExample}) {
    out << "\nRead by owner `" << owner_name(owner)
        << "`:\n\n| variable | owner | parsed as | default | meaning |\n|---|---|---|---|---|\n";
    for (const Setting* s : read_settings())
      if (s->owner == owner)
        out << "| `" << s->name << "` | " << owner_name(owner) << " | " << parse_name(*s) << " | "
            << s->fallback << " | " << s->doc << " |\n";
  }
  return 0;
}

int run_trace_command(const trace::TraceOptions& options, std::ostream& out, std::ostream& err) {
  return trace::run_trace(options, out, err);
}

}  // namespace dtlaunch
