#include "launch/inputs.hpp"

#include "core/error.hpp"

namespace dtlaunch {

namespace {

std::optional<std::string> text_of(const EnvMap& env, std::string_view name) {
  if (auto value = env.get(name)) return std::string(*value);
  return std::nullopt;
}

}  // namespace

Mode resolve_mode(const LaunchOptions& options, SlurmContext slurm) {
  const bool local_options =
      options.nnodes || options.node_rank || options.max_restarts > 0 || options.log_dir;
  switch (options.mode) {
    case Mode::kSlurm:
      if (options.nproc_per_node)
        throw Error::usage(
            "--mode slurm and --nproc-per-node contradict each other: under Slurm "
            "every srun task is one worker");
      return Mode::kSlurm;
    case Mode::kLocal:
      if (!options.nproc_per_node) throw Error::usage("--mode local needs --nproc-per-node N");
      return Mode::kLocal;
    case Mode::kAuto:
      break;
  }
  if (options.nproc_per_node) return Mode::kLocal;
  if (local_options)
    throw Error::usage(
        "--nnodes, --node-rank, --max-restarts and --log-dir belong to the local "
        "mode: add --nproc-per-node N");
  if (slurm == SlurmContext::kNone)
    throw Error::usage(
        "not inside a Slurm step (no SLURM_STEP_ID): run under 'srun dtlaunch "
        "PROGRAM', or spawn workers locally with 'dtlaunch --nproc-per-node N "
        "PROGRAM'");
  return Mode::kSlurm;  // read_slurm_step refuses a job context without a step, with the reason
}

LaunchInputs read_inputs(const EnvMap& env, Mode mode) {
  LaunchInputs in;
  in.slurm = detect_slurm(env);
  if (mode == Mode::kSlurm || in.slurm == SlurmContext::kStep) in.step = read_slurm_step(env);
  in.master_addr = text_of(env, "MASTER_ADDR");
  in.master_port = text_of(env, "MASTER_PORT");
  in.port_range = text_of(env, "DTLAUNCH_PORT_RANGE");
  in.cpu_bind = text_of(env, "DTLAUNCH_CPU_BIND");
  in.mem_bind = text_of(env, "DTLAUNCH_MEM_BIND");
  if (auto cvd = env.get_raw("CUDA_VISIBLE_DEVICES")) in.cuda_visible_devices = std::string(*cvd);
  in.cuda_device_order = text_of(env, "CUDA_DEVICE_ORDER");
  in.omp_num_threads = text_of(env, "OMP_NUM_THREADS");
  in.slurm_step_gpus = text_of(env, "SLURM_STEP_GPUS");
  in.slurm_job_gpus = text_of(env, "SLURM_JOB_GPUS");
  in.slurm_cpu_bind_type = text_of(env, "SLURM_CPU_BIND_TYPE");
  if (auto root = env.get("DTLAUNCH_TOPOLOGY_ROOT")) in.topology_root = std::string(*root);
  in.path = text_of(env, "PATH");
  return in;
}

}  // namespace dtlaunch
