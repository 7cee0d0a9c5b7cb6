#include "cli/commands.hpp"

#include <functional>
#include <iostream>
#include <memory>
#include <ostream>

#include "affinity/apply.hpp"
#include "cli/log.hpp"
#include "contract/contract.hpp"
#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/hmac.hpp"
#include "core/text.hpp"
#include "doctor/launch_check.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/plan.hpp"
#include "launch/render.hpp"
#include "launch/worker_env.hpp"
#include "proc/exec.hpp"
#include "proc/supervisor.hpp"
#include "watch/watch.hpp"

namespace dtlaunch::cli {

namespace {

// A dry run supervises nothing: a fixed tag keeps its output the same from run to run.
class DryRunSystem final : public launch::LiveSystem {
 public:
  std::string random_tag() const override { return "dry-run"; }
};

// The doctor's options from the command line's (lib/doctor builds and judges the reports).
doctor::LaunchCheckOptions check_options(const RunFlags& flags, watch::WatchJoin* watch) {
  doctor::LaunchCheckOptions options;
  options.preflight = flags.check != Check::kDoctor;
  options.verbose = flags.verbose;
  options.json = flags.check_json;
  options.timeout = flags.check_timeout;
  options.network = {flags.check_network, flags.network_budget};
  if (watch) options.relay = {watch->endpoint(), watch::ring_successors, &watch->ring()};
  return options;
}

// --watch under Slurm: the heartbeat endpoints go through the preflight's check-in, so
// --watch implies --preflight (set in `flags`).
std::unique_ptr<watch::WatchJoin> join_watch(const launch::LaunchPlan& launch_plan,
                                             RunFlags& flags) {
  if (!flags.watch) return nullptr;
  if (launch_plan.mode != launch::Mode::kSlurm)
    throw core::Error(
        core::ExitCode::kBadInput,
        "--watch is for the Slurm path (srun ... dtlaunch --watch PROGRAM); in local mode "
        "dtlaunch supervises its workers anyway");
  if (flags.dry_run) return nullptr;
  constexpr std::chrono::seconds kShortestWatchTimeout{3};
  if (flags.watch_timeout < kShortestWatchTimeout)
    throw core::Error(core::ExitCode::kBadInput,
                      "--watch-timeout of " + core::duration_text(flags.watch_timeout) +
                          ": below " + core::duration_text(kShortestWatchTimeout) +
                          " a loaded node's heartbeat may be late (docs/cli.md)");
  if (flags.check == Check::kNone) flags.check = Check::kPreflight;
  return std::make_unique<watch::WatchJoin>(
      launch_plan.spec.master.addr, launch_plan.workers.front().rank, launch_plan.spec.world_size);
}

// What proc starts for a planned worker: its binding is applied where the program starts, by
// proc (in the child between fork and exec, or by this process just before its own exec).
proc::WorkerProcess worker_process(const launch::LaunchSpec& spec,
                                   const launch::PlannedWorker& worker) {
  return {worker.rank,
          worker.local_rank,
          spec.program_path,
          spec.argv,
          worker.env,
          worker.binding ? std::make_shared<const affinity::PreparedBinding>(*worker.binding)
                         : nullptr};
}

}  // namespace

int run_launch(const launch::LaunchOptions& options, const RunFlags& flags, const core::EnvMap& env,
               std::ostream& out) {
  const launch::LaunchPlan launch_plan = flags.dry_run
                                             ? launch::plan(options, env, DryRunSystem())
                                             : launch::plan(options, env, launch::LiveSystem());
  const launch::LaunchSpec& spec = launch_plan.spec;
  log_notes(spec.notes, launch_plan.who, launch_plan.speaks_for_job, flags.verbose);
  RunFlags checked = flags;
  // The checks and --watch meet the step's tasks as the whole job; a --job-node step is a part.
  if (options.job_node && (flags.watch || flags.check != Check::kNone))
    throw core::Error(core::ExitCode::kBadInput,
                      "--job-node: --watch, --preflight and the doctor check a whole job in one "
                      "step; this step is one node of it");
  const std::unique_ptr<watch::WatchJoin> watch = join_watch(launch_plan, checked);
  if (checked.check != Check::kNone && !flags.dry_run) {
    const int status =
        doctor::check_launch(launch_plan, check_options(checked, watch.get()), out);
    if (flags.check == Check::kDoctor || status != 0) return status;
  }
  if (flags.dry_run) {
    out << (flags.format == OutputFormat::kJson
                ? launch::render_json(launch_plan.workers, spec.argv)
                : launch::render_shell(launch_plan.workers, spec.argv));
    out.flush();
    return 0;
  }

  const std::chrono::milliseconds grace = options.grace.value_or(proc::kDefaultGrace);
  if (launch_plan.mode == launch::Mode::kSlurm) {
    out.flush();
    const proc::WorkerProcess self = worker_process(spec, launch_plan.workers.front());
    if (watch) {
      // The job's identity on the heartbeat's connections: MASTER_PORT is the job's own.
      const std::uint64_t tag =
          std::hash<std::string>{}(spec.master.addr + ":" + std::to_string(spec.master.port) + "/" +
                                   std::to_string(spec.world_size));
      std::optional<core::JobKey> key;
      if (const auto hex = contract::read_text(env, contract::setting::kJobKey))
        key = core::parse_job_key(*hex, contract::env_var::kJobKey);
      return watch->run(self, flags.watch_timeout, grace, tag, key);
    }
    proc::exec_worker(self);
  }

  proc::SupervisorOptions supervision;
  supervision.grace = grace;
  supervision.log_dir = options.log_dir;
  supervision.max_restarts = options.max_restarts;
  supervision.descendant_marker = *launch_plan.descendant_marker;
  auto make_workers = [&](std::uint32_t restart_count) {
    std::vector<proc::WorkerProcess> processes;
    // A fresh secret per attempt: a frame captured in one attempt is refused in the next.
    const std::string key = core::to_hex(core::make_job_key());
    for (const launch::PlannedWorker& w :
         launch::plan_workers(launch_plan, env, restart_count, key))
      processes.push_back(worker_process(spec, w));
    return processes;
  };
  out.flush();  // nothing of ours may come out after the workers' output
  return proc::run_workers(make_workers, supervision).exit_status;
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
  for (const contract::ExportedVar& v : contract::exported_vars())
    out << "| `" << v.name << "` | " << v.meaning << " | " << v.source << " |\n";
  out << "\nRemoved from the inherited environment when present:\n\n"
         "| variable | why |\n|---|---|\n";
  for (const contract::RemovedVar& v : contract::removed_vars())
    out << "| `" << v.name << "` | " << v.why << " |\n";
  // Then what is read, one table per owner, so that each docs page holds its owner's
  // (docs/environment.md the launcher's, doctor's and example's; docs/ddp.md the runtime's).
  for (contract::Owner owner : {contract::Owner::kLauncher, contract::Owner::kDoctor,
                                contract::Owner::kRuntime, contract::Owner::kExample}) {
    out << "\nRead by owner `" << contract::owner_name(owner)
        << "`:\n\n| variable | owner | parsed as | default | meaning |\n|---|---|---|---|---|\n";
    for (const contract::Setting* s : contract::read_settings())
      if (s->owner == owner)
        out << "| `" << s->name << "` | " << contract::owner_name(owner) << " | "
            << contract::parse_name(*s) << " | " << s->fallback << " | " << s->doc << " |\n";
  }
  return 0;
}

int run_trace_command(const trace::TraceOptions& options, std::ostream& out, std::ostream& err) {
  return trace::run_trace(options, out, err);
}

}  // namespace dtlaunch::cli
