#include "doctor/launch_check.hpp"

#include <algorithm>
#include <iostream>
#include <memory>
#include <ostream>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/hmac.hpp"
#include "doctor/checks.hpp"
#include "doctor/client.hpp"
#include "doctor/network_agent.hpp"
#include "doctor/probe.hpp"
#include "doctor/server.hpp"
#include "doctor/software.hpp"
#include "launch/build_spec.hpp"

namespace dtlaunch::doctor {
namespace {

// The id of the device the contract binds: the narrowed list's one entry under
// --gpu-bind=isolate, else the entry of the visible devices that the contract's index names.
std::string bound_device_of(const contract::WorkerContract& contract, const launch::GpuPlan& gpu) {
  if (!contract.device) return "";
  if (contract.visible_devices) return *contract.visible_devices;
  return *contract.device < gpu.visible.size() ? gpu.visible[*contract.device] : "";
}

// One worker's report before the node is probed: what it is told, and what its program will see
// (the plan's environment for it, the one a launch gives it).
TaskReport report_of(const launch::LaunchSpec& spec, const launch::PlannedWorker& worker) {
  const core::EnvMap& seen = worker.env;
  TaskReport r;
  r.contract = worker.contract;
  r.placement.visible_devices =
      std::string(seen.get_raw(contract::env_var::kCudaVisibleDevices).value_or(""));
  r.placement.omp_num_threads =
      std::string(seen.get(contract::env_var::kOmpNumThreads).value_or(""));
  r.placement.bound_device = bound_device_of(worker.contract, spec.gpu);
  r.placement.gpu_sharing_allowed = spec.gpu.allow_sharing;
  r.placement.gpu_isolated_by_slurm = spec.gpu.isolated_by_slurm;
  r.placement.gpus_on_node = static_cast<std::uint32_t>(spec.gpu.visible.size());
  if (worker.binding)
    r.placement.cpus = worker.binding->cpus.to_list();  // what --cpu-bind will give it
  r.programs.program.path = spec.program_path;
  r.programs.launcher_version = std::string("dtlaunch ") + DTLAUNCH_VERSION;
  // The variables the contract sets per rank are checked above as the contract, not compared
  // as the node's.
  std::vector<std::string_view> set_by_contract = {contract::env_var::kCudaVisibleDevices};
  for (const contract::ExportedVar& var : contract::exported_vars())
    set_by_contract.push_back(var.name);
  for (const contract::EnvChange& change : worker.changes) set_by_contract.push_back(change.name);
  r.software.env = compared_env(seen.vars(), set_by_contract);
  return r;
}

// Where a rank's GPU can be located on this node, the CPUs local to it, and whether the rank's
// own CPUs are all elsewhere. The topology is read only when some rank has a GPU.
void mark_cpus_far_from_gpu(const launch::LaunchPlan& launch_plan,
                            std::vector<TaskReport>& reports) {
  if (std::all_of(reports.begin(), reports.end(),
                  [](const TaskReport& r) { return r.placement.bound_device.empty(); }))
    return;
  affinity::Topology topology;
  try {
    topology = launch::LiveSystem().topology(launch_plan.inputs.topology_root);
  } catch (const core::Error&) {
    return;  // no topology, no locality: the other checks still stand
  }
  const auto gpus = launch::locate_gpus(launch_plan.spec, launch_plan.inputs, topology);
  for (TaskReport& r : reports) {
    const std::uint32_t local_rank = r.contract.local_rank;
    if (local_rank >= gpus.size() || !gpus[local_rank]) continue;
    const affinity::CpuSet& local = topology.gpus[*gpus[local_rank]].local_cpus;
    r.placement.gpu_local_cpus = local.to_list();
    const auto cpus = affinity::CpuSet::parse(r.placement.cpus);
    r.placement.cpus_far_from_gpu =
        cpus && !cpus->empty() && !local.empty() && !cpus->intersects(local);
  }
}

}  // namespace

std::vector<TaskReport> plan_reports(const launch::LaunchPlan& launch_plan) {
  std::vector<TaskReport> reports;
  for (const launch::PlannedWorker& w : launch_plan.workers) {
    reports.push_back(report_of(launch_plan.spec, w));
    if (reports.size() > 1) {
      copy_node_facts(reports.front(), reports.back());
      continue;
    }
    probe_node(reports.front());
    // The node's software once, by its lowest local rank, with that worker's environment.
    if (w.local_rank == 0) {
      const core::EnvMap& seen = w.env;
      probe_software(reports.front(),
                     contract::read_text(seen, contract::setting::kDoctorLibraryPath).value_or(""),
                     contract::read_text(seen, contract::setting::kDoctorPath).value_or(""));
    }
  }
  mark_cpus_far_from_gpu(launch_plan, reports);
  probe_exec(reports, launch_plan.spec.program_path, launch_plan.spec.argv,
             launch_plan.workers.front().env);
  return reports;
}

Expectation expectation_of(const launch::LaunchPlan& launch_plan) {
  if (launch_plan.mode == launch::Mode::kSlurm)
    return slurm_expectation(launch_plan.inputs.step->hosts,
                             launch_plan.inputs.step->tasks_per_node,
                             launch_plan.inputs.step->distribution);
  return local_expectation(launch_plan.spec.nnodes, launch_plan.spec.local_world_size);
}

namespace {

// The preflight's exclude list once more, sealed with the job's key: `dtlaunch job` reads only
// this line, never the report's, which a program could print too (docs/security.md).
void say_sealed_exclude(const launch::LaunchPlan& launch_plan, const Diagnosis& verdict) {
  const auto key = contract::read_text(launch_plan.workers.front().env, contract::setting::kJobKey);
  if (verdict.exclude.empty() || !key) return;
  std::cerr << core::seal_line(core::parse_job_key(*key, contract::env_var::kJobKey),
                               std::string(kSealedExclude) + verdict.exclude)
            << std::endl;
}

// Rank 0's side: serve, print.
int judge(const launch::LaunchPlan& launch_plan, std::vector<TaskReport> mine,
          Clock::time_point deadline, const LaunchCheckOptions& options, const NetworkAgent* agent,
          std::ostream& out) {
  const Diagnosis verdict =
      serve(expectation_of(launch_plan), std::move(mine), launch_plan.spec.master.port, deadline,
            options.network, agent, options.relay);
  const std::string report = options.json ? render_json(verdict) : render_table(verdict);
  if (!options.preflight) {
    out << report;
    out.flush();
  } else if (!verdict.ok() || !verdict.problems.empty() || options.verbose) {
    std::cerr << report;
    say_sealed_exclude(launch_plan, verdict);
  }
  return verdict.ok() ? 0 : static_cast<int>(core::ExitCode::kProblem);
}

}  // namespace

int check_launch(const launch::LaunchPlan& launch_plan, const LaunchCheckOptions& options,
                 std::ostream& out) {
  const auto deadline = Clock::now() + options.timeout;
  std::vector<TaskReport> mine = plan_reports(launch_plan);
  // One network test agent per node: the task (or launcher) with the node's local rank 0.
  std::unique_ptr<NetworkAgent> agent;
  if (options.network.enabled && launch_plan.workers.front().local_rank == 0) {
    agent = NetworkAgent::start();
    if (agent) mine.front().network_test_port = agent->port();
  }
  if (launch_plan.workers.front().rank == 0)
    return judge(launch_plan, std::move(mine), deadline, options, agent.get(), out);
  try {
    return report_to_rank0(
        launch_plan.spec.master.addr, launch_plan.spec.master.port, std::move(mine), deadline,
        agent.get(),
        options.network.enabled ? options.network.budget : std::chrono::milliseconds(0),
        options.relay);
  } catch (const core::Error& e) {
    std::cerr << "dtlaunch doctor: " << e.what() << "\n";
    return static_cast<int>(core::ExitCode::kProblem);
  }
}

}  // namespace dtlaunch::doctor
