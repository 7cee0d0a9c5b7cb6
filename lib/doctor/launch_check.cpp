#include "doctor/launch_check.hpp"

#include <algorithm>
#include <iostream>
#include <memory>
#include <ostream>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "doctor/checks.hpp"
#include "doctor/network.hpp"
#include "doctor/software.hpp"
#include "launch/build_spec.hpp"

namespace dtlaunch::doctor {
namespace {

// The id of the device the contract binds: the narrowed list's one entry under
// --gpu-bind=isolate, else the entry of the visible devices that the contract's index names.
std::string bound_device_of(const WorkerContract& contract, const GpuPlan& gpu) {
  if (!contract.device) return "";
  if (contract.visible_devices) return *contract.visible_devices;
  return *contract.device < gpu.visible.size() ? gpu.visible[*contract.device] : "";
}

// One worker's report before the node is probed: what it is told, and what its program will see
// of the inherited environment.
TaskReport report_of(const LaunchSpec& spec, const PlannedWorker& worker, const EnvMap& env) {
  const EnvMap seen = apply_env(env, worker.changes);
  TaskReport r;
  r.contract = worker.contract;
  r.visible_devices = std::string(seen.get_raw(env_var::kCudaVisibleDevices).value_or(""));
  r.omp_num_threads = std::string(seen.get(env_var::kOmpNumThreads).value_or(""));
  r.bound_device = bound_device_of(worker.contract, spec.gpu);
  r.gpu_sharing_allowed = spec.gpu.allow_sharing;
  r.gpu_isolated_by_slurm = spec.gpu.isolated_by_slurm;
  r.gpus_on_node = static_cast<std::uint32_t>(spec.gpu.visible.size());
  if (worker.binding) r.cpus = worker.binding->cpus.to_list();  // what --cpu-bind will give it
  r.program.path = spec.program_path;
  r.launcher_version = std::string("dtlaunch ") + DTLAUNCH_VERSION;
  // The variables the contract sets per rank are checked above as the contract, not compared
  // as the node's.
  std::vector<std::string_view> set_by_contract = {env_var::kCudaVisibleDevices};
  for (const ExportedVar& var : exported_vars()) set_by_contract.push_back(var.name);
  for (const EnvChange& change : worker.changes) set_by_contract.push_back(change.name);
  r.env = compared_env(seen.vars(), set_by_contract);
  return r;
}

// Where a rank's GPU can be located on this node, the CPUs local to it, and whether the rank's
// own CPUs are all elsewhere. The topology is read only when some rank has a GPU.
void mark_cpus_far_from_gpu(const LaunchPlan& launch, std::vector<TaskReport>& reports) {
  if (std::all_of(reports.begin(), reports.end(),
                  [](const TaskReport& r) { return r.bound_device.empty(); }))
    return;
  Topology topology;
  try {
    topology = LiveSystem().topology(launch.inputs.topology_root);
  } catch (const Error&) {
    return;  // no topology, no locality: the other checks still stand
  }
  const auto gpus = locate_gpus(launch.spec, launch.inputs, topology);
  for (TaskReport& r : reports) {
    const std::uint32_t local_rank = r.contract.local_rank;
    if (local_rank >= gpus.size() || !gpus[local_rank]) continue;
    const CpuSet& local = topology.gpus[*gpus[local_rank]].local_cpus;
    r.gpu_local_cpus = local.to_list();
    const auto cpus = CpuSet::parse(r.cpus);
    r.cpus_far_from_gpu = cpus && !cpus->empty() && !local.empty() && !cpus->intersects(local);
  }
}

}  // namespace

std::vector<TaskReport> plan_reports(const LaunchPlan& launch, const EnvMap& env) {
  std::vector<TaskReport> reports;
  for (const PlannedWorker& w : launch.workers) {
    reports.push_back(report_of(launch.spec, w, env));
    if (reports.size() > 1) {
      copy_node_facts(reports.front(), reports.back());
      continue;
    }
    probe_node(reports.front());
    // The node's software once, by its lowest local rank, with that worker's environment.
    if (w.local_rank == 0) {
      const EnvMap seen = apply_env(env, w.changes);
      probe_software(reports.front(), read_text(seen, setting::kDoctorLibraryPath).value_or(""),
                     read_text(seen, setting::kDoctorPath).value_or(""));
    }
  }
  mark_cpus_far_from_gpu(launch, reports);
  probe_exec(reports, launch.spec.program_path, launch.spec.argv,
             apply_env(env, launch.workers.front().changes));
  return reports;
}

Expectation expectation_of(const LaunchPlan& launch) {
  if (launch.mode == Mode::kSlurm)
    return slurm_expectation(launch.inputs.step->hosts, launch.inputs.step->tasks_per_node,
                             launch.inputs.step->distribution);
  return local_expectation(launch.spec.nnodes, launch.spec.local_world_size);
}

namespace {

// Rank 0's side: serve, hand the --watch ring back, print.
int judge(const LaunchPlan& launch, std::vector<TaskReport> mine, Clock::time_point deadline,
          const LaunchCheckOptions& options, const NetworkAgent* agent, std::ostream& out) {
  const Verdict verdict = serve(expectation_of(launch), std::move(mine), launch.spec.master.port,
                                deadline, options.network, agent);
  if (options.ring)
    for (const TaskReport& r : verdict.reports)
      if (!r.heartbeat.empty() && r.contract.rank != 0 && r.contract.rank <= kHeartbeatWindow)
        (*options.ring)[r.contract.rank] = r.heartbeat;
  const std::string report = options.json ? render_json(verdict) : render_table(verdict);
  if (!options.preflight) {
    out << report;
    out.flush();
  } else if (!verdict.ok() || !verdict.problems.empty() || options.verbose) {
    std::cerr << report;
  }
  return verdict.ok() ? 0 : static_cast<int>(ExitCode::kProblem);
}

}  // namespace

int check_launch(const LaunchPlan& launch, const EnvMap& env, const LaunchCheckOptions& options,
                 std::ostream& out) {
  const auto deadline = Clock::now() + options.timeout;
  std::vector<TaskReport> mine = plan_reports(launch, env);
  // One network test agent per node: the task (or launcher) with the node's local rank 0.
  std::unique_ptr<NetworkAgent> agent;
  if (options.network.enabled && launch.workers.front().local_rank == 0) {
    agent = NetworkAgent::start();
    if (agent) mine.front().network_port = agent->port();
  }
  mine.front().heartbeat = options.heartbeat;
  if (launch.workers.front().rank == 0)
    return judge(launch, std::move(mine), deadline, options, agent.get(), out);
  try {
    return report_to_rank0(
        launch.spec.master.addr, launch.spec.master.port, std::move(mine), deadline, agent.get(),
        options.network.enabled ? options.network.budget : std::chrono::milliseconds(0),
        options.ring);
  } catch (const Error& e) {
    std::cerr << "dtlaunch doctor: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kProblem);
  }
}

}  // namespace dtlaunch::doctor
