#include "contract/contract.hpp"

#include <array>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/hmac.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::contract {

namespace {
using Write = ExportedVar::Write;
using Value = std::optional<std::string>;
namespace v = env_var;

Value text(std::uint64_t number) {
  return std::to_string(number);
}

constexpr std::array kExported = {
    ExportedVar{v::kRank, "global rank of this worker, 0..WORLD_SIZE-1",
                "SLURM_PROCID; local mode: node rank x nproc-per-node + local rank", Write::kSet,
                [](const WorkerContract& c) { return text(c.rank); }},
    ExportedVar{v::kLocalRank, "rank of this worker on its node",
                "SLURM_LOCALID; local mode: index of the spawned worker", Write::kSet,
                [](const WorkerContract& c) { return text(c.local_rank); }},
    ExportedVar{v::kWorldSize, "number of workers in the job",
                "SLURM_STEP_NUM_TASKS (else SLURM_NTASKS, SLURM_NPROCS); local mode: "
                "nnodes x nproc-per-node",
                Write::kSet, [](const WorkerContract& c) { return text(c.world_size); }},
    ExportedVar{v::kLocalWorldSize, "number of workers on this node",
                "this node's entry of SLURM_STEP_TASKS_PER_NODE; local mode: nproc-per-node",
                Write::kSet, [](const WorkerContract& c) { return text(c.local_world_size); }},
    ExportedVar{v::kGroupRank, "node rank (torchrun's agent rank)", "same as NODE_RANK",
                Write::kSet, [](const WorkerContract& c) { return text(c.node_rank); }},
    ExportedVar{v::kGroupWorldSize, "number of nodes (torchrun's agent count)", "same as NNODES",
                Write::kSet, [](const WorkerContract& c) { return text(c.nnodes); }},
    ExportedVar{v::kRoleRank, "rank within the role; dtlaunch has one role", "same as RANK",
                Write::kSet, [](const WorkerContract& c) { return text(c.rank); }},
    ExportedVar{v::kRoleWorldSize, "size of the role", "same as WORLD_SIZE", Write::kSet,
                [](const WorkerContract& c) { return text(c.world_size); }},
    ExportedVar{v::kRoleName, "torchrun's role name", "always 'default'", Write::kSet,
                [](const WorkerContract&) { return Value("default"); }},
    ExportedVar{v::kNodeRank, "index of this node in the job, 0..NNODES-1",
                "SLURM_NODEID; local mode: --node-rank (default 0)", Write::kSet,
                [](const WorkerContract& c) { return text(c.node_rank); }},
    ExportedVar{v::kNnodes, "number of nodes in the job",
                "SLURM_STEP_NUM_NODES (else SLURM_JOB_NUM_NODES, SLURM_NNODES); local mode: "
                "--nnodes (default 1)",
                Write::kSet, [](const WorkerContract& c) { return text(c.nnodes); }},
    ExportedVar{v::kMasterAddr, "host where rank 0 runs and listens (the rendezvous store)",
                "--master-addr, else an inherited MASTER_ADDR, else the node of rank 0 in "
                "SLURM_STEP_NODELIST (SLURM_HOSTFILE's first host under "
                "--distribution=arbitrary); local mode standalone: 127.0.0.1",
                Write::kSet, [](const WorkerContract& c) { return Value(c.master_addr); }},
    ExportedVar{v::kMasterPort, "TCP port of the rendezvous store on MASTER_ADDR",
                "--master-port, else an inherited MASTER_PORT, else a hash of SLURM_JOB_ID, "
                "SLURM_STEP_ID and SLURM_HET_JOB_OFFSET in the port range (docs/master-port.md); "
                "local mode standalone: a free port found by binding",
                Write::kSet, [](const WorkerContract& c) { return text(c.master_port); }},
    ExportedVar{v::kRestartCount, "how many times the worker group was restarted",
                "under Slurm DTLAUNCH_RESTART_COUNT (set by dtlaunch job), else 0; local mode: "
                "0..--max-restarts",
                Write::kSet, [](const WorkerContract& c) { return text(c.restart_count); }},
    ExportedVar{v::kMaxRestarts, "restarts allowed", "--max-restarts (default 0)", Write::kSet,
                [](const WorkerContract& c) { return text(c.max_restarts); }},
    ExportedVar{v::kTorchelasticRunId,
                "job id; only with --export-run-id, because PyTorch Lightning then treats the "
                "job as torchrun-launched and turns off its Slurm requeue",
                "--run-id, else SLURM_JOB_ID, else 'none'", Write::kSet,
                [](const WorkerContract& c) { return c.torchelastic_run_id; }},
    ExportedVar{v::kRunId,
                "identity of the run, at most 128 printable ASCII characters: the DDP runtime "
                "refuses a rank whose run differs from rank 0's (two jobs that share "
                "MASTER_ADDR:MASTER_PORT by accident), and rank 0 goes on waiting for its own",
                "slurm-JOB.STEP (+HET offset) under Slurm; local mode: local-<supervisor tag>, or "
                "local-<--run-id> with --nnodes > 1 (unset without --run-id, and an inherited "
                "value is removed)",
                Write::kSetOrRemove, [](const WorkerContract& c) { return c.dtlaunch_run_id; }},
    ExportedVar{v::kNcclAsyncErrorHandling, "lets NCCL errors abort the job instead of hanging",
                "1, unless already set", Write::kUnlessInherited,
                [](const WorkerContract&) { return Value("1"); }},
    ExportedVar{v::kOmpNumThreads, "threads per worker for OpenMP/MKL/torch intra-op",
                "unless already set: with --cpu-bind, the physical cores bound to the worker; "
                "else SLURM_CPUS_PER_TASK, else 1",
                Write::kUnlessInherited, [](const WorkerContract& c) { return c.omp_num_threads; }},
    ExportedVar{v::kCudaDevice,
                "index of this worker's GPU within the visible CUDA devices: what cudaSetDevice "
                "or torch.cuda.set_device needs; unset when no GPU is bound",
                "LOCAL_RANK with node-wide visibility; 0 when Slurm or --gpu-bind=isolate gave "
                "the worker one device",
                Write::kSetOrRemove,
                [](const WorkerContract& c) { return c.device ? text(*c.device) : Value(); }},
    ExportedVar{v::kCudaVisibleDevices,
                "changed only with --gpu-bind=isolate: narrowed to this worker's device",
                "the inherited list (or a count of /dev/nvidiaN), entry DTLAUNCH_CUDA_DEVICE",
                Write::kSet, [](const WorkerContract& c) { return c.visible_devices; }},
    ExportedVar{
        v::kCudaDeviceOrder,
        "makes CUDA number the GPUs in PCI bus order, the order in which dtlaunch "
        "located them for --cpu-bind (CUDA's default puts the fastest first)",
        "PCI_BUS_ID with --cpu-bind other than none, unless already set "
        "(docs/affinity.md)",
        Write::kUnlessInherited,
        [](const WorkerContract& c) { return c.pci_device_order ? Value("PCI_BUS_ID") : Value(); }},
    ExportedVar{v::kSupervisor,
                "local mode only: names the dtlaunch that supervises this worker, so that if "
                "dtlaunch is SIGKILLed its guardian finds the worker's descendants by their "
                "inherited environment, even those in a session of their own (docs/local-mode.md)",
                "dtlaunch's pid and 16 random hex digits; not set under Slurm, where the step's "
                "cgroup does this",
                Write::kSet, [](const WorkerContract& c) { return c.supervisor; }},
    ExportedVar{v::kJobKey,
                "the job's secret, 64 hex digits: the heartbeat's frames are authenticated with "
                "it, so that a process outside the job cannot end or steer it "
                "(docs/security.md); --dry-run prints it redacted",
                "local mode: a fresh one per attempt; under Slurm the inherited one (dtlaunch job "
                "makes one per attempt), left as it is",
                Write::kSet, [](const WorkerContract& c) { return c.job_key; }},
};

constexpr std::array kRemoved = {
    RemovedVar{"TORCHELASTIC_USE_AGENT_STORE",
               "when True, PyTorch makes rank 0 a store client of an agent store that dtlaunch "
               "does not run, and the job cannot connect"},
};

// Collects every problem, so that one line names all of them rather than the first only.
class Reader {
 public:
  explicit Reader(const core::EnvMap& env) : env_(env) {}

  // The number a kNumber declaration (contract/settings.hpp) allows.
  std::optional<std::uint32_t> number(const Setting& setting, bool required) {
    const std::string_view name = setting.name;
    const std::uint64_t max = setting.max;
    const auto value = env_.get(name);
    if (!value) {
      if (required) missing_.emplace_back(name);
      return std::nullopt;
    }
    if (auto n = core::parse_uint(*value, max)) return static_cast<std::uint32_t>(*n);
    problem(std::string(name) + "='" + core::excerpt(*value) + "' is not an integer in 0.." +
            std::to_string(max));
    return std::nullopt;
  }

  std::optional<std::string> text(std::string_view name, bool required) {
    const auto value = env_.get(name);
    if (!value && required) missing_.emplace_back(name);
    return value ? std::optional<std::string>(*value) : std::nullopt;
  }

  // "NAME=5 is not below LIMIT=5", when both were read.
  void below(std::string_view name, std::optional<std::uint32_t> value, std::string_view limit,
             std::optional<std::uint32_t> bound) {
    if (value && bound && *bound > 0 && *value >= *bound)
      problem(std::string(name) + "=" + std::to_string(*value) + " is not below " +
              std::string(limit) + "=" + std::to_string(*bound));
  }
  void at_least_one(std::string_view name, std::optional<std::uint32_t> value) {
    if (value && *value == 0) problem(std::string(name) + "='0' must be at least 1");
  }

  void problem(std::string what) { problems_.push_back(std::move(what)); }

  // One line: "bad launch environment: missing RANK, MASTER_PORT (...); WORLD_SIZE='x' is ...".
  void throw_if_any() const {
    if (missing_.empty() && problems_.empty()) return;
    std::string msg = "bad launch environment: ";
    if (!missing_.empty()) {
      msg += "missing ";
      for (std::size_t i = 0; i < missing_.size(); ++i) msg += (i ? ", " : "") + missing_[i];
      msg += " (set by dtlaunch or torchrun)";
    }
    for (std::size_t i = 0; i < problems_.size(); ++i) {
      msg += (i || !missing_.empty()) ? "; " : "";
      msg += problems_[i];
    }
    throw core::Error(core::ExitCode::kBadInput, msg);
  }

 private:
  const core::EnvMap& env_;
  std::vector<std::string> missing_;
  std::vector<std::string> problems_;
};

}  // namespace

std::span<const ExportedVar> exported_vars() {
  return kExported;
}
std::span<const RemovedVar> removed_vars() {
  return kRemoved;
}

std::string supervisor_marker(std::string_view tag) {
  return std::string(env_var::kSupervisor) + "=" + std::string(tag);
}

EnvDelta to_env(const WorkerContract& contract, const core::EnvMap& inherited) {
  EnvDelta delta;
  for (const ExportedVar& var : kExported) {
    Value value = var.value(contract);
    if (value && (var.write != Write::kUnlessInherited || !inherited.contains(var.name)))
      delta.push_back({std::string(var.name), std::move(value)});
    else if (!value && var.write == Write::kSetOrRemove && inherited.has_entry(var.name))
      delta.push_back({std::string(var.name), std::nullopt});
  }
  for (const RemovedVar& removed : kRemoved)
    if (inherited.has_entry(removed.name)) delta.push_back({std::string(removed.name), {}});
  return delta;
}

core::EnvMap apply_env(core::EnvMap inherited, const EnvDelta& delta) {
  for (const EnvChange& change : delta) {
    if (change.value)
      inherited.set(change.name, *change.value);
    else
      inherited.erase(change.name);
  }
  return inherited;
}

std::string run_id_problem(std::string_view id) {
  if (id.size() > kMaxRunIdBytes)
    return "is " + std::to_string(id.size()) + " bytes long; at most " +
           std::to_string(kMaxRunIdBytes) + " are allowed";
  for (std::size_t i = 0; i < id.size(); ++i) {
    const auto u = static_cast<unsigned char>(id[i]);
    if (u < 0x20 || u > 0x7e)
      return std::string(u < 0x20 || u == 0x7f ? "has a control character"
                                               : "has a non-ASCII byte") +
             " at byte " + std::to_string(i + 1) + "; only printable ASCII is allowed";
  }
  return "";
}

WorkerContract parse_contract(const core::EnvMap& env,
                              const std::vector<std::string>& more_problems) {
  Reader in(env);
  namespace s = setting;
  const auto rank = in.number(s::kRank, true);
  const auto world = in.number(s::kWorldSize, true);
  const auto local_rank = in.number(s::kLocalRank, false);
  const auto local_world = in.number(s::kLocalWorldSize, false);
  const auto device = in.number(s::kCudaDevice, false);
  const auto addr = in.text(v::kMasterAddr, true);
  const auto port = in.number(s::kRuntimeMasterPort, true);
  const auto node_rank = in.number(s::kNodeRank, false);
  const auto nnodes = in.number(s::kNnodes, false);
  const auto restart_count = in.number(s::kTorchelasticRestartCount, false);
  const auto max_restarts = in.number(s::kMaxRestarts, false);

  in.at_least_one(v::kWorldSize, world);
  in.below(v::kRank, rank, v::kWorldSize, world);
  in.at_least_one(v::kLocalWorldSize, local_world);
  in.below(v::kLocalRank, local_rank, v::kLocalWorldSize, local_world);
  if (port && *port == 0) in.problem(std::string(v::kMasterPort) + "='0' is not a usable port");
  in.at_least_one(v::kNnodes, nnodes);
  in.below(v::kNodeRank, node_rank, v::kNnodes, nnodes);
  const auto run_id = in.text(v::kRunId, false);
  if (run_id)
    if (const std::string why = run_id_problem(*run_id); !why.empty())
      in.problem(std::string(v::kRunId) + "='" + core::excerpt(*run_id) + "' " + why);
  const auto job_key = in.text(v::kJobKey, false);
  if (job_key) {
    try {  // the value is a secret: never quoted
      core::parse_job_key(*job_key, v::kJobKey);
    } catch (const core::Error& e) {
      in.problem(e.what());
    }
  }
  for (const std::string& problem : more_problems) in.problem(problem);
  in.throw_if_any();

  WorkerContract c;
  c.rank = *rank;
  c.world_size = *world;
  c.local_rank = local_rank.value_or(0);
  c.local_world_size = local_world.value_or(1);
  c.node_rank = node_rank.value_or(0);
  c.nnodes = nnodes.value_or(1);
  c.master_addr = *addr;
  c.master_port = static_cast<std::uint16_t>(*port);
  c.restart_count = restart_count.value_or(0);
  c.max_restarts = max_restarts.value_or(0);
  c.dtlaunch_run_id = run_id;
  c.torchelastic_run_id = in.text(v::kTorchelasticRunId, false);
  c.device = device;
  if (auto visible = env.get_raw(v::kCudaVisibleDevices)) c.visible_devices = std::string(*visible);
  c.supervisor = in.text(v::kSupervisor, false);
  c.job_key = job_key;
  c.omp_num_threads = in.text(v::kOmpNumThreads, false);
  c.pci_device_order = env.get(v::kCudaDeviceOrder) == "PCI_BUS_ID";
  return c;
}

}  // namespace dtlaunch::contract
