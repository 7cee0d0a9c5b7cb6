// Every variable that dtlaunch, its DDP runtime, its doctor or its example reads, declared once:
// name, owner, how it is parsed, its default and one line of doc, in the spirit of NCCL_PARAM. A
// family the doctor compares is one declaration named by its prefix ("NCCL_*").
// The launcher's read_inputs and read_slurm_step and the runtime's RuntimeSettings read through
// these declarations, so `dtlaunch env-table` prints every variable they read and the docs tested
// against it (docs/environment.md, docs/ddp.md) cannot miss one. What the launcher writes is the
// other table, exported_vars() (contract.hpp); a variable both read and written is spelled once,
// in env_var. A declaration is listed in read_settings() too (settings.cpp), which a unit test
// holds to this file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "contract/contract.hpp"
#include "core/env_map.hpp"

namespace dtlaunch::contract {

// Who reads the variable: the launcher (dtlaunch and `dtlaunch job`), the DDP runtime
// (lib/ddp), the pre-start checks (`dtlaunch doctor`) or the example training program.
enum class Owner { kLauncher, kDoctor, kRuntime, kExample };  // env-table's order
std::string_view owner_name(Owner owner);

struct Setting {
  enum class Parse {
    kText,     // the value as it is, checked where it is used; empty counts as unset
    kRawText,  // the same, but an empty value is a value (CUDA_VISIBLE_DEVICES= hides every GPU)
    kNumber,   // decimal digits only, 0..max
    kSwitch,   // 0 or 1
  };
  std::string_view name;
  Owner owner = Owner::kLauncher;
  Parse parse = Parse::kText;
  std::uint64_t max = 0;      // kNumber's bound
  std::string_view fallback;  // what applies when it is unset, as the docs say it
  std::string_view doc;
};

// What the parser accepts, for the table: "text", "0 or 1", "integer 0..86400".
std::string parse_name(const Setting& setting);

// Every declaration below, in the order env-table prints them (by owner, then as declared).
std::span<const Setting* const> read_settings();

// The value of `setting` in `env`, nullopt when unset (an empty value counts as unset, except
// for kRawText).
std::optional<std::string> read_text(const core::EnvMap& env, const Setting& setting);
// How a message quotes what a variable holds, through core::excerpt(): "SLURM_STEP_GPUS='0,1'".
std::string quoted_value(const Setting& setting, std::string_view value);
// "" when `value` is what `setting` accepts, else the one-line problem, the value quoted through
// quoted_value(): "DTLAUNCH_DDP_SHM='yes' must be 0 or 1".
std::string setting_problem(const Setting& setting, std::string_view value);
// A kNumber or kSwitch setting's value; nullopt when unset. Throws Error (bad input) with the
// line of setting_problem.
std::optional<std::uint64_t> read_number(const core::EnvMap& env, const Setting& setting);
// A kSwitch setting: true for 1, false for 0, `otherwise` when unset.
bool read_switch(const core::EnvMap& env, const Setting& setting, bool otherwise);

namespace setting {

// The declarations' four forms.
constexpr Setting text(std::string_view name, Owner owner, std::string_view fallback,
                       std::string_view doc) {
  return {name, owner, Setting::Parse::kText, 0, fallback, doc};
}
constexpr Setting raw_text(std::string_view name, Owner owner, std::string_view fallback,
                           std::string_view doc) {
  return {name, owner, Setting::Parse::kRawText, 0, fallback, doc};
}
constexpr Setting number(std::string_view name, Owner owner, std::uint64_t max,
                         std::string_view fallback, std::string_view doc) {
  return {name, owner, Setting::Parse::kNumber, max, fallback, doc};
}
constexpr Setting on_off(std::string_view name, Owner owner, std::string_view fallback,
                         std::string_view doc) {
  return {name, owner, Setting::Parse::kSwitch, 0, fallback, doc};
}

// The launcher: Slurm's step, in read_slurm_step (docs/environment.md, "What dtlaunch reads").
inline constexpr Setting kSlurmStepId =
    text("SLURM_STEP_ID", Owner::kLauncher, "SLURM_STEPID; unset in a batch script: refused",
         "being inside an srun step at all (dtlaunch job refuses one); MASTER_PORT and "
         "DTLAUNCH_RUN_ID");
inline constexpr Setting kSlurmStepIdOld =
    text("SLURM_STEPID", Owner::kLauncher, "-", "older name of SLURM_STEP_ID");
inline constexpr Setting kSlurmJobId =
    text("SLURM_JOB_ID", Owner::kLauncher, "SLURM_JOBID",
         "MASTER_PORT, DTLAUNCH_RUN_ID and TORCHELASTIC_RUN_ID (docs/master-port.md); the job "
         "whose steps dtlaunch job runs");
inline constexpr Setting kSlurmJobIdOld =
    text("SLURM_JOBID", Owner::kLauncher, "-", "older name of SLURM_JOB_ID");
inline constexpr Setting kSlurmProcId =
    text("SLURM_PROCID", Owner::kLauncher, "- (required)", "RANK");
inline constexpr Setting kSlurmLocalId =
    text("SLURM_LOCALID", Owner::kLauncher, "- (required)", "LOCAL_RANK");
inline constexpr Setting kSlurmNodeId = text("SLURM_NODEID", Owner::kLauncher, "- (required)",
                                             "NODE_RANK, this node's entry of the tasks per node");
inline constexpr Setting kSlurmStepNumTasks =
    text("SLURM_STEP_NUM_TASKS", Owner::kLauncher, "SLURM_NTASKS, SLURM_NPROCS (logged with -v)",
         "WORLD_SIZE (the step's, not the allocation's)");
inline constexpr Setting kSlurmNtasks = text(
    "SLURM_NTASKS", Owner::kLauncher, "SLURM_NPROCS",
    "WORLD_SIZE when SLURM_STEP_NUM_TASKS is unset; in a batch script, the tasks that would wait");
inline constexpr Setting kSlurmNprocs =
    text("SLURM_NPROCS", Owner::kLauncher, "-", "older name of SLURM_NTASKS");
inline constexpr Setting kSlurmStepNumNodes =
    text("SLURM_STEP_NUM_NODES", Owner::kLauncher, "SLURM_JOB_NUM_NODES, SLURM_NNODES", "NNODES");
inline constexpr Setting kSlurmJobNumNodes =
    text("SLURM_JOB_NUM_NODES", Owner::kLauncher, "SLURM_NNODES",
         "NNODES when SLURM_STEP_NUM_NODES is unset");
inline constexpr Setting kSlurmNnodes =
    text("SLURM_NNODES", Owner::kLauncher, "-", "older name of SLURM_JOB_NUM_NODES");
inline constexpr Setting kSlurmStepNodelist =
    text("SLURM_STEP_NODELIST", Owner::kLauncher, "SLURM_JOB_NODELIST, SLURM_NODELIST",
         "the hosts, in Slurm's order (docs/hostlist.md)");
inline constexpr Setting kSlurmJobNodelist =
    text("SLURM_JOB_NODELIST", Owner::kLauncher, "SLURM_NODELIST",
         "the hosts when SLURM_STEP_NODELIST is unset; the allocation's nodes for dtlaunch job");
inline constexpr Setting kSlurmdNodename =
    text("SLURMD_NODENAME", Owner::kLauncher, "the host name",
         "the batch host's node: dtlaunch job --live hosts the store there (MASTER_ADDR)");
inline constexpr Setting kSlurmNodelist =
    text("SLURM_NODELIST", Owner::kLauncher, "-", "older name of SLURM_JOB_NODELIST");
inline constexpr Setting kSlurmStepTasksPerNode =
    text("SLURM_STEP_TASKS_PER_NODE", Owner::kLauncher, "SLURM_TASKS_PER_NODE",
         "LOCAL_WORLD_SIZE, in Slurm's compressed form 8(x2),4");
inline constexpr Setting kSlurmTasksPerNode = text(
    "SLURM_TASKS_PER_NODE", Owner::kLauncher, "-",
    "LOCAL_WORLD_SIZE when SLURM_STEP_TASKS_PER_NODE is unset; the tasks per node of dtlaunch job");
inline constexpr Setting kSlurmHetJobOffset = text("SLURM_HET_JOB_OFFSET", Owner::kLauncher, "0",
                                                   "MASTER_PORT and DTLAUNCH_RUN_ID in a het job");
inline constexpr Setting kSlurmDistribution =
    text("SLURM_DISTRIBUTION", Owner::kLauncher, "-",
         "the node of rank 0: the first node, except under arbitrary (SLURM_HOSTFILE)");
inline constexpr Setting kSlurmHostfile =
    text("SLURM_HOSTFILE", Owner::kLauncher, "-",
         "under --distribution=arbitrary, its first host is rank 0's (read up to 64 KiB)");
inline constexpr Setting kSlurmCpusPerTask =
    text("SLURM_CPUS_PER_TASK", Owner::kLauncher, "1",
         "OMP_NUM_THREADS when unset; the CPUs per task of dtlaunch job");
inline constexpr Setting kSlurmGpusPerTask =
    text("SLURM_GPUS_PER_TASK", Owner::kLauncher, "SLURMD_TRES_BIND",
         "the GPUs of the task ([TYPE:]N) and that Slurm isolated them per task");
inline constexpr Setting kSlurmdTresBind =
    text("SLURMD_TRES_BIND", Owner::kLauncher, "-",
         "how slurmd bound the task's GPUs: a plain srun --gpus-per-task=N sets only "
         "gpu:per_task:N, --gpu-bind=single:K sets gpu:single:K");
inline constexpr Setting kSlurmStepGpus =
    text("SLURM_STEP_GPUS", Owner::kLauncher, "SLURM_JOB_GPUS",
         "the count of the node's GPUs when CUDA_VISIBLE_DEVICES is unset");
inline constexpr Setting kSlurmJobGpus = text(
    "SLURM_JOB_GPUS", Owner::kLauncher, "the count of /dev/nvidiaN",
    "the count of the node's GPUs when neither CUDA_VISIBLE_DEVICES nor SLURM_STEP_GPUS is set");
inline constexpr Setting kSlurmCpuBindType =
    text("SLURM_CPU_BIND_TYPE", Owner::kLauncher, "the mask is shared by the node's tasks",
         "whether srun bound each task to CPUs of its own (then the task is alone in its mask)");
inline constexpr Setting kSlurmNtasksPerNode =
    text("SLURM_NTASKS_PER_NODE", Owner::kLauncher, "SLURM_TASKS_PER_NODE",
         "dtlaunch job: the tasks per node of each step");
inline constexpr Setting kSlurmGpusPerNode = text("SLURM_GPUS_PER_NODE", Owner::kLauncher, "-",
                                                  "dtlaunch job: the GPUs per node of each step");

// The launcher: the user's own values and dtlaunch's variables.
inline constexpr Setting kCudaVisibleDevices = raw_text(
    env_var::kCudaVisibleDevices, Owner::kLauncher, "SLURM_STEP_GPUS, SLURM_JOB_GPUS, /dev/nvidiaN",
    "the GPUs of the node or task; empty means none, as CUDA reads it");
inline constexpr Setting kCudaDeviceOrder =
    text(env_var::kCudaDeviceOrder, Owner::kLauncher, "exported as PCI_BUS_ID when binding",
         "whether CUDA_VISIBLE_DEVICES indices are in PCI bus order, so that --cpu-bind can locate "
         "the GPUs");
inline constexpr Setting kMasterAddr =
    text(env_var::kMasterAddr, Owner::kLauncher, "the node of rank 0", "a value the user set wins");
inline constexpr Setting kMasterPort =
    text(env_var::kMasterPort, Owner::kLauncher, "the hashed port", "a value the user set wins");
inline constexpr Setting kOmpNumThreads =
    text(env_var::kOmpNumThreads, Owner::kLauncher, "SLURM_CPUS_PER_TASK, else 1",
         "a value the user set wins");
inline constexpr Setting kNcclAsyncErrorHandling =
    text(env_var::kNcclAsyncErrorHandling, Owner::kLauncher, "1", "a value the user set wins");
inline constexpr Setting kPortRange =
    text("DTLAUNCH_PORT_RANGE", Owner::kLauncher, "20000-32767", "the range of the hashed port");
inline constexpr Setting kRestartCount = text(
    "DTLAUNCH_RESTART_COUNT", Owner::kLauncher, "0",
    "TORCHELASTIC_RESTART_COUNT under Slurm: the attempt dtlaunch job runs (docs/resilience.md)");
inline constexpr Setting kCpuBind = text("DTLAUNCH_CPU_BIND", Owner::kLauncher, "none",
                                         "--cpu-bind when not given (docs/affinity.md)");
inline constexpr Setting kMemBind =
    text("DTLAUNCH_MEM_BIND", Owner::kLauncher, "local when binding CPUs, else none",
         "--mem-bind when not given (docs/affinity.md)");
// lib/affinity spells the name for its errors (kTopologyRootVariable); launch/inputs.cpp checks
// that the two agree.
inline constexpr Setting kTopologyRoot =
    text("DTLAUNCH_TOPOLOGY_ROOT", Owner::kLauncher, "/",
         "read the topology (sys/, proc/) under this directory instead of /");
inline constexpr Setting kPath = text("PATH", Owner::kLauncher, "-", "the lookup of the program");

// The doctor: what it compares across nodes besides the contract.
inline constexpr Setting kDoctorLibraryPath =
    raw_text("LD_LIBRARY_PATH", Owner::kDoctor, "-",
             "the program's libraries, resolved by the loader on each node and compared");
inline constexpr Setting kDoctorPath =
    raw_text("PATH", Owner::kDoctor, "-", "the program found on each node, compared");
// Families, by prefix: each variable of theirs as the program will see it, compared across the
// nodes (those the contract sets are left out).
inline constexpr Setting kDoctorNcclVars =
    raw_text("NCCL_*", Owner::kDoctor, "-", "NCCL's settings, compared across nodes");
inline constexpr Setting kDoctorGlooVars =
    raw_text("GLOO_*", Owner::kDoctor, "-", "Gloo's settings, compared across nodes");
inline constexpr Setting kDoctorCudaVars =
    raw_text("CUDA_*", Owner::kDoctor, "-", "CUDA's settings, compared across nodes");
inline constexpr Setting kDoctorTorchVars =
    raw_text("TORCH_*", Owner::kDoctor, "-", "PyTorch's settings, compared across nodes");
inline constexpr Setting kDoctorOmpVars =
    raw_text("OMP_*", Owner::kDoctor, "-", "OpenMP's settings, compared across nodes");

// The DDP runtime: the contract it reads (parse_contract), then its own settings.
inline constexpr Setting kRank = number(env_var::kRank, Owner::kRuntime, (1u << 24) - 1,
                                        "- (required)", "this process's rank, below WORLD_SIZE");
inline constexpr Setting kWorldSize = number(env_var::kWorldSize, Owner::kRuntime, 1u << 24,
                                             "- (required)", "the number of ranks, at least 1");
inline constexpr Setting kRuntimeMasterAddr =
    text(env_var::kMasterAddr, Owner::kRuntime, "- (required)",
         "the host of the rendezvous store; rank 0 hosts it");
inline constexpr Setting kRuntimeMasterPort =
    number(env_var::kMasterPort, Owner::kRuntime, 65535, "- (required)",
           "the port of the store, 1 to 65535");
inline constexpr Setting kLocalRank =
    number(env_var::kLocalRank, Owner::kRuntime, (1u << 24) - 1, "0",
           "the rank within the node, below LOCAL_WORLD_SIZE");
inline constexpr Setting kLocalWorldSize = number(env_var::kLocalWorldSize, Owner::kRuntime,
                                                  1u << 24, "1", "the number of ranks on the node");
inline constexpr Setting kNodeRank =
    number(env_var::kNodeRank, Owner::kRuntime, (1u << 24) - 1, "0", "checked only: below NNODES");
inline constexpr Setting kNnodes =
    number(env_var::kNnodes, Owner::kRuntime, 1u << 24, "1", "checked only: at least 1");
inline constexpr Setting kCudaDevice =
    number(env_var::kCudaDevice, Owner::kRuntime, 1023, "LOCAL_RANK (as under torchrun)",
           "the index of this rank's GPU in the visible CUDA devices, for cudaSetDevice");
inline constexpr Setting kRunId =
    text(env_var::kRunId, Owner::kRuntime, "empty",
         "the job's identity, at most 128 printable ASCII characters; every rank's must equal rank "
         "0's (Two jobs on one port); the flight recorder's file names");
inline constexpr Setting kGlooSocketIfname =
    raw_text("GLOO_SOCKET_IFNAME", Owner::kRuntime,
             "loopback for a loopback MASTER_ADDR, else the address of the hostname",
             "Gloo's network interfaces, comma-separated, as in PyTorch");
inline constexpr Setting kUseLibuv =
    on_off("USE_LIBUV", Owner::kRuntime, "1",
           "as in PyTorch 2.4+: 0 hosts the store on TCPStore's older server, 1 on its libuv "
           "server where LibTorch has it");
inline constexpr Setting kStoreHosted =
    on_off("DTLAUNCH_STORE_HOSTED", Owner::kRuntime, "0",
           "1: another process hosts the store at MASTER_ADDR:MASTER_PORT (dtlaunch-store), so "
           "rank 0 connects to it like the others, and LiveRun can replace rank 0");
inline constexpr Setting kShm =
    on_off("DTLAUNCH_DDP_SHM", Owner::kRuntime, "1",
           "0 turns the shared-memory all_reduce off (on any rank: on every rank)");
inline constexpr Setting kHier =
    on_off("DTLAUNCH_DDP_HIER", Owner::kRuntime, "1",
           "0 turns the hierarchical all_reduce across nodes off (on any rank: on every rank): "
           "Gloo's ring over all ranks");
inline constexpr Setting kTraceEntries =
    number("DTLAUNCH_DDP_TRACE_ENTRIES", Owner::kRuntime, 1'000'000, "2000",
           "flight recorder ring size (88 bytes an entry, allocated as entries arrive); 0: no "
           "recorder (sequence numbers stay)");
inline constexpr Setting kTraceDir =
    text("DTLAUNCH_DDP_TRACE_DIR", Owner::kRuntime, "unset: no files",
         "where RUN.aATTEMPT.rank-R[.error].json is written");
inline constexpr Setting kTraceAtExit = on_off("DTLAUNCH_DDP_TRACE_AT_EXIT", Owner::kRuntime, "0",
                                               "1: also write the file when the group ends");
inline constexpr Setting kDumpSignal = on_off("DTLAUNCH_DDP_DUMP_SIGNAL", Owner::kRuntime, "1",
                                              "1: SIGUSR2 writes the flight recorder (only over "
                                              "SIGUSR2's default action); 0: SIGUSR2 left alone");
inline constexpr Setting kTorchelasticRestartCount =
    number(env_var::kRestartCount, Owner::kRuntime, UINT32_MAX, "0",
           "the attempt in the flight recorder's file names, with SLURM_RESTART_COUNT");
inline constexpr Setting kMaxRestarts =
    number(env_var::kMaxRestarts, Owner::kRuntime, UINT32_MAX, "0", "checked only");
inline constexpr Setting kSlurmRestartCount =
    text("SLURM_RESTART_COUNT", Owner::kRuntime, "0",
         "the requeues of the job, added to the attempt (a malformed value counts 0)");
inline constexpr Setting kCheck =
    on_off("DTLAUNCH_DDP_CHECK", Owner::kRuntime, "0",
           "1: compare each collective's signature across ranks first");
inline constexpr Setting kReportGraceMs =
    number("DTLAUNCH_DDP_REPORT_GRACE_MS", Owner::kRuntime, 3'600'000, "2 x watcher interval + 500",
           "how long a failed rank waits for the others' positions");
inline constexpr Setting kTimeline =
    on_off("DTLAUNCH_DDP_TIMELINE", Owner::kRuntime, "0", "1: rank 0's startup line always");
inline constexpr Setting kJobKey =
    text(env_var::kJobKey, Owner::kRuntime, "none: frames checked for their shape only",
         "64 hex digits: the job's secret that authenticates the heartbeat (docs/security.md); "
         "dtlaunch sets it, read by the runtime and --watch");
inline constexpr Setting kHeartbeatTimeout =
    number("DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", Owner::kRuntime, 86'400, "10",
           "whole seconds a peer may be unresponsive (frozen, cut off) before it is lost: "
           "declared within this + min(1 s, this/5); 0: no heartbeat");
inline constexpr Setting kLive =
    on_off("DTLAUNCH_DDP_LIVE", Owner::kRuntime, "0",
           "1: replacements for lost ranks will be started (dtlaunch job --live), so LiveRun's "
           "survivors recover instead of failing; 0: LiveRun throws a loss as any group does");
inline constexpr Setting kLiveJoin =
    on_off("DTLAUNCH_DDP_LIVE_JOIN", Owner::kRuntime, "0",
           "1: this process replaces a lost rank of a running job that recovers live (LiveRun): it "
           "takes RANK's place and gets the training state from a survivor");
inline constexpr Setting kLiveWait =
    number("DTLAUNCH_DDP_LIVE_WAIT", Owner::kRuntime, 86'400, "60",
           "whole seconds LiveRun's survivors wait for a lost rank's replacement (and a "
           "replacement for its place) before they fail with the loss, as without live recovery");
inline constexpr Setting kMallocMmapThreshold =
    text("MALLOC_MMAP_THRESHOLD_", Owner::kRuntime, "32 MiB with keep_step_memory",
         "set: DistributedDataParallel leaves glibc's mmap threshold to it");
inline constexpr Setting kMallocTrimThreshold =
    text("MALLOC_TRIM_THRESHOLD_", Owner::kRuntime, "1 GiB with keep_step_memory",
         "set: DistributedDataParallel leaves glibc's trim threshold to it");

// The example (apps/train).
inline constexpr Setting kXdgCacheHome =
    text("XDG_CACHE_HOME", Owner::kExample, "/tmp/dtlaunch-fashion-mnist-UID",
         "the example caches Fashion-MNIST in its dtlaunch/");
}  // namespace setting

}  // namespace dtlaunch::contract
