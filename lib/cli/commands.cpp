#include "cli/commands.hpp"

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string_view>

#include "affinity/apply.hpp"
#include "cli/log.hpp"
#include "cli/watch.hpp"
#include "contract/contract.hpp"
#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "doctor/network.hpp"
#include "doctor/probe.hpp"
#include "doctor/software.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/build_spec.hpp"
#include "launch/gpu.hpp"
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

// Every task's report, from the environment its worker would get: the checks see exactly
// what the program will.
doctor::TaskReport report_of(const LaunchSpec& spec, const PlannedWorker& worker,
                             const EnvMap& env) {
  const EnvMap final_env = apply_env(env, worker.changes);
  auto value = [&](std::string_view name) { return std::string(final_env.get(name).value_or("")); };
  doctor::TaskReport r;
  r.rank = worker.rank;
  r.local_rank = worker.local_rank;
  r.node_rank = spec.node_rank;
  r.world_size = spec.world_size;
  r.nnodes = spec.nnodes;
  r.master_addr = spec.master.addr;
  r.master_port = spec.master.port;
  r.run_id = value(env_var::kRunId);
  r.visible_devices = std::string(final_env.get_raw(env_var::kCudaVisibleDevices).value_or(""));
  if (auto device = choose_device(spec.gpu, worker.local_rank, spec.local_world_size))
    r.bound_device = device->id;
  r.gpu_sharing_allowed = spec.gpu.allow_sharing;
  r.gpu_isolated_by_slurm = spec.gpu.isolated_by_slurm;
  r.gpus_on_node = static_cast<std::uint32_t>(spec.gpu.visible.size());
  r.omp_num_threads = value("OMP_NUM_THREADS");
  if (worker.binding) r.cpus = worker.binding->cpus.to_list();  // what --cpu-bind will give it
  r.program.path = spec.program_path;
  r.launcher_version = std::string("dtlaunch ") + DTLAUNCH_VERSION;
  // The variables dtlaunch sets per rank are its own (checked above), not the node's.
  std::vector<std::string_view> set_by_dtlaunch = {env_var::kCudaVisibleDevices};
  for (const ExportedVar& var : exported_vars()) set_by_dtlaunch.push_back(var.name);
  for (const EnvChange& change : worker.changes) set_by_dtlaunch.push_back(change.name);
  r.env = doctor::compared_env(final_env.vars(), set_by_dtlaunch);
  return r;
}

// Where a rank's GPU can be located on this node, the CPUs local to it, and whether the rank's
// own CPUs are all elsewhere. The topology is read only when some rank has a GPU.
void mark_cpus_far_from_gpu(const LaunchSpec& spec, const LaunchInputs& in,
                            std::vector<doctor::TaskReport>& reports) {
  if (std::all_of(reports.begin(), reports.end(),
                  [](const doctor::TaskReport& r) { return r.bound_device.empty(); }))
    return;
  Topology topology;
  try {
    topology = LiveSystem().topology(in.topology_root);
  } catch (const Error&) {
    return;  // no topology, no locality: the other checks still stand
  }
  const auto gpus = locate_gpus(spec, in, topology);
  for (doctor::TaskReport& r : reports) {
    if (r.local_rank >= gpus.size() || !gpus[r.local_rank]) continue;
    const CpuSet& local = topology.gpus[*gpus[r.local_rank]].local_cpus;
    r.gpu_local_cpus = local.to_list();
    const auto cpus = CpuSet::parse(r.cpus);
    r.cpus_far_from_gpu = cpus && !cpus->empty() && !local.empty() && !cpus->intersects(local);
  }
}

// Runs the checks for this launcher's workers; returns 0 or 3. The task (or node) that hosts
// rank 0 judges and prints; the others report and get the same status back.
// `watch`: --watch's heartbeat endpoint goes with the report, and the ring comes back.
int run_checks(const LaunchPlan& launch, const doctor::Expectation& expected, const EnvMap& env,
               const RunFlags& flags, std::ostream& out, WatchJoin* watch) {
  const LaunchSpec& spec = launch.spec;
  const std::vector<PlannedWorker>& planned = launch.workers;
  const auto deadline = doctor::Clock::now() + flags.check_timeout;
  std::vector<doctor::TaskReport> mine;
  for (const PlannedWorker& w : planned) {
    mine.push_back(report_of(spec, w, env));
    if (mine.size() == 1) {
      doctor::probe_node(mine.front());
      // The node's software once, by its lowest local rank, with that worker's environment.
      if (w.local_rank == 0) {
        const EnvMap final_env = apply_env(env, w.changes);
        doctor::probe_software(mine.front(),
                               std::string(final_env.get_raw("LD_LIBRARY_PATH").value_or("")),
                               std::string(final_env.get_raw("PATH").value_or("")));
      }
    } else
      doctor::copy_node_facts(mine.front(), mine.back());
  }
  mark_cpus_far_from_gpu(spec, launch.inputs, mine);
  doctor::probe_exec(mine, spec.program_path, spec.argv, apply_env(env, planned.front().changes));
  // One network test agent per node: the task (or launcher) with the node's local rank 0.
  doctor::NetworkOptions network{flags.check_network, flags.network_budget};
  std::unique_ptr<doctor::NetworkAgent> agent;
  if (network.enabled && planned.front().local_rank == 0) {
    agent = doctor::NetworkAgent::start();
    if (agent) mine.front().network_port = agent->port();
  }
  if (watch) mine.front().heartbeat = watch->endpoint();
  const bool hosts_rank0 = planned.front().rank == 0;
  if (!hosts_rank0) {
    try {
      return doctor::report_to_rank0(
          spec.master.addr, spec.master.port, std::move(mine), deadline, agent.get(),
          network.enabled ? network.budget : std::chrono::milliseconds(0),
          watch ? &watch->ring() : nullptr);
    } catch (const Error& e) {
      std::cerr << "dtlaunch doctor: " << e.what() << "\n";
      return static_cast<int>(ExitCode::kProblem);
    }
  }
  const doctor::Verdict verdict =
      doctor::serve(expected, std::move(mine), spec.master.port, deadline, network, agent.get());
  if (watch)
    for (const doctor::TaskReport& r : verdict.reports)
      if (!r.heartbeat.empty() && r.rank != 0 && r.rank <= doctor::kHeartbeatWindow)
        watch->ring()[r.rank] = r.heartbeat;
  const std::string report =
      flags.check_json ? doctor::render_json(verdict) : doctor::render_table(verdict);
  if (flags.check == Check::kDoctor) {
    out << report;
    out.flush();
  } else if (!verdict.ok() || !verdict.problems.empty() || flags.verbose) {
    std::cerr << report;  // stdout belongs to the program that a passing preflight starts
  }
  return verdict.ok() ? 0 : static_cast<int>(ExitCode::kProblem);
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
    if (flags.watch_timeout < std::chrono::seconds(3))
      throw Error(ExitCode::kBadInput,
                  "--watch-timeout " + seconds_text(flags.watch_timeout) +
                      ": below 3s a loaded node's heartbeat may be late (docs/cli.md)");
    watch =
        std::make_unique<WatchJoin>(spec.master.addr, launch.workers.front().rank, spec.world_size);
    if (checked.check == Check::kNone) checked.check = Check::kPreflight;
  }
  if (checked.check != Check::kNone && !flags.dry_run) {
    const doctor::Expectation expected =
        launch.mode == Mode::kSlurm ? doctor::slurm_expectation(launch.inputs.step->hosts,
                                                                launch.inputs.step->tasks_per_node,
                                                                launch.inputs.step->distribution)
                                    : doctor::local_expectation(spec.nnodes, spec.local_world_size);
    const int status = run_checks(launch, expected, env, checked, out, watch.get());
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
