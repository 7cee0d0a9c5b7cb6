#include "launch/contract.hpp"

#include <array>

namespace dtlaunch {

namespace {
constexpr std::array kExported = {
    ExportedVar{"RANK", "global rank of this worker, 0..WORLD_SIZE-1",
                "SLURM_PROCID; local mode: node rank x nproc-per-node + local rank"},
    ExportedVar{"LOCAL_RANK", "rank of this worker on its node",
                "SLURM_LOCALID; local mode: index of the spawned worker"},
    ExportedVar{"WORLD_SIZE", "number of workers in the job",
                "SLURM_STEP_NUM_TASKS (else SLURM_NTASKS, SLURM_NPROCS); local mode: "
                "nnodes x nproc-per-node"},
    ExportedVar{"LOCAL_WORLD_SIZE", "number of workers on this node",
                "this node's entry of SLURM_STEP_TASKS_PER_NODE; local mode: nproc-per-node"},
    ExportedVar{"GROUP_RANK", "node rank (torchrun's agent rank)", "same as NODE_RANK"},
    ExportedVar{"GROUP_WORLD_SIZE", "number of nodes (torchrun's agent count)", "same as NNODES"},
    ExportedVar{"ROLE_RANK", "rank within the role; dtlaunch has one role", "same as RANK"},
    ExportedVar{"ROLE_WORLD_SIZE", "size of the role", "same as WORLD_SIZE"},
    ExportedVar{"ROLE_NAME", "torchrun's role name", "always 'default'"},
    ExportedVar{"NODE_RANK", "index of this node in the job, 0..NNODES-1",
                "SLURM_NODEID; local mode: --node-rank (default 0)"},
    ExportedVar{"NNODES", "number of nodes in the job",
                "SLURM_STEP_NUM_NODES (else SLURM_JOB_NUM_NODES, SLURM_NNODES); local mode: "
                "--nnodes (default 1)"},
    ExportedVar{"MASTER_ADDR", "host where rank 0 runs and listens (the rendezvous store)",
                "--master-addr, else an inherited MASTER_ADDR, else the node of rank 0 in "
                "SLURM_STEP_NODELIST (SLURM_HOSTFILE's first host under "
                "--distribution=arbitrary); local mode standalone: 127.0.0.1"},
    ExportedVar{"MASTER_PORT", "TCP port of the rendezvous store on MASTER_ADDR",
                "--master-port, else an inherited MASTER_PORT, else a hash of SLURM_JOB_ID, "
                "SLURM_STEP_ID and SLURM_HET_JOB_OFFSET in the port range (docs/master-port.md); "
                "local mode standalone: a free port found by binding"},
    ExportedVar{"TORCHELASTIC_RESTART_COUNT", "how many times the worker group was restarted",
                "0 under Slurm; local mode: 0..--max-restarts"},
    ExportedVar{"TORCHELASTIC_MAX_RESTARTS", "restarts allowed", "--max-restarts (default 0)"},
    ExportedVar{"TORCHELASTIC_RUN_ID",
                "job id; only with --export-run-id, because PyTorch Lightning then treats the "
                "job as torchrun-launched and turns off its Slurm requeue",
                "--run-id, else SLURM_JOB_ID, else 'none'"},
    ExportedVar{"DTLAUNCH_RUN_ID",
                "identity of the run: the DDP runtime refuses, on both sides, a rank whose run "
                "differs from rank 0's (two jobs that share MASTER_ADDR:MASTER_PORT by accident)",
                "slurm-JOB.STEP (+HET offset) under Slurm; local mode: local-<supervisor tag>, or "
                "local-<--run-id> with --nnodes > 1 (unset without --run-id, and an inherited "
                "value is removed)"},
    ExportedVar{"TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "lets NCCL errors abort the job instead of hanging", "1, unless already set"},
    ExportedVar{"OMP_NUM_THREADS", "threads per worker for OpenMP/MKL/torch intra-op",
                "unless already set: with --cpu-bind, the physical cores bound to the worker; "
                "else SLURM_CPUS_PER_TASK, else 1"},
    ExportedVar{"DTLAUNCH_CUDA_DEVICE",
                "index of this worker's GPU within the visible CUDA devices: what cudaSetDevice "
                "or torch.cuda.set_device needs; unset when no GPU is bound",
                "LOCAL_RANK with node-wide visibility; 0 when Slurm or --gpu-bind=isolate gave "
                "the worker one device"},
    ExportedVar{"CUDA_VISIBLE_DEVICES",
                "changed only with --gpu-bind=isolate: narrowed to this worker's device",
                "the inherited list (or a count of /dev/nvidiaN), entry DTLAUNCH_CUDA_DEVICE"},
    ExportedVar{"CUDA_DEVICE_ORDER",
                "makes CUDA number the GPUs in PCI bus order, the order in which dtlaunch "
                "located them for --cpu-bind (CUDA's default puts the fastest first)",
                "PCI_BUS_ID with --cpu-bind other than none, unless already set "
                "(docs/affinity.md)"},
    ExportedVar{kSupervisorVar,
                "local mode only: names the dtlaunch that supervises this worker, so that if "
                "dtlaunch is SIGKILLed its guardian finds the worker's descendants by their "
                "inherited environment, even those in a session of their own (docs/local-mode.md)",
                "dtlaunch's pid and 16 random hex digits; not set under Slurm, where the step's "
                "cgroup does this"},
};

constexpr std::array kRemoved = {
    RemovedVar{"TORCHELASTIC_USE_AGENT_STORE",
               "when True, PyTorch makes rank 0 a store client of an agent store that dtlaunch "
               "does not run, and the job cannot connect"},
};
}  // namespace

std::span<const ExportedVar> exported_vars() {
  return kExported;
}
std::span<const RemovedVar> removed_vars() {
  return kRemoved;
}

}  // namespace dtlaunch
