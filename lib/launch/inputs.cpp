#include "launch/inputs.hpp"

#include "affinity/read_topology.hpp"
#include "contract/settings.hpp"
#include "core/error.hpp"

namespace dtlaunch::launch {

using contract::read_text;

Mode resolve_mode(const LaunchOptions& options, SlurmContext slurm) {
  const bool local_options =
      options.nnodes || options.node_rank || options.max_restarts > 0 || options.log_dir;
  switch (options.mode) {
    case Mode::kSlurm:
      if (options.nproc_per_node)
        throw core::Error::usage(
            "--mode slurm and --nproc-per-node contradict each other: under Slurm "
            "every srun task is one worker");
      return Mode::kSlurm;
    case Mode::kLocal:
      if (!options.nproc_per_node)
        throw core::Error::usage("--mode local needs --nproc-per-node N");
      return Mode::kLocal;
    case Mode::kAuto:
      break;
  }
  if (options.nproc_per_node) return Mode::kLocal;
  if (local_options)
    throw core::Error::usage(
        "--nnodes, --node-rank, --max-restarts and --log-dir belong to the local "
        "mode: add --nproc-per-node N");
  if (slurm == SlurmContext::kNone)
    throw core::Error::usage(
        "not inside a Slurm step (no SLURM_STEP_ID): run under 'srun dtlaunch "
        "PROGRAM', or spawn workers locally with 'dtlaunch --nproc-per-node N "
        "PROGRAM'");
  return Mode::kSlurm;  // read_slurm_step refuses a job context without a step, with the reason
}

static_assert(contract::setting::kTopologyRoot.name == affinity::kTopologyRootVariable);

LaunchInputs read_inputs(const core::EnvMap& env, Mode mode) {
  LaunchInputs in;
  in.slurm = detect_slurm(env);
  if (mode == Mode::kSlurm || in.slurm == SlurmContext::kStep) in.step = read_slurm_step(env);
  namespace s = contract::setting;
  in.master_addr = contract::read_text(env, s::kMasterAddr);
  in.master_port = contract::read_text(env, s::kMasterPort);
  in.port_range = contract::read_text(env, s::kPortRange);
  in.cpu_bind = contract::read_text(env, s::kCpuBind);
  in.mem_bind = contract::read_text(env, s::kMemBind);
  in.cuda_visible_devices = contract::read_text(env, s::kCudaVisibleDevices);
  in.cuda_device_order = contract::read_text(env, s::kCudaDeviceOrder);
  in.omp_num_threads = contract::read_text(env, s::kOmpNumThreads);
  in.slurm_step_gpus = contract::read_text(env, s::kSlurmStepGpus);
  in.slurm_job_gpus = contract::read_text(env, s::kSlurmJobGpus);
  in.slurm_cpu_bind_type = contract::read_text(env, s::kSlurmCpuBindType);
  in.topology_root =
      contract::read_text(env, s::kTopologyRoot).value_or(std::string(s::kTopologyRoot.fallback));
  in.path = contract::read_text(env, s::kPath);
  in.restart_count = contract::read_text(env, s::kRestartCount);
  return in;
}

}  // namespace dtlaunch::launch
