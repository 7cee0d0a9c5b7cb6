// The worker contract: what a launcher tells each worker, as one value, and its one encoding in
// environment variables. The launcher writes it (to_env), the DDP runtime reads it (parse), and
// `dtlaunch env-table` prints the table that names the variables (docs/environment.md). A test
// holds the three together: parse(apply(to_env(w))) == w.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch::contract {

struct WorkerContract {
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  std::uint32_t world_size = 1;
  std::uint32_t local_world_size = 1;
  std::uint32_t node_rank = 0;
  std::uint32_t nnodes = 1;
  std::string master_addr;
  std::uint16_t master_port = 0;
  std::uint32_t restart_count = 0;
  std::uint32_t max_restarts = 0;
  // DTLAUNCH_RUN_ID, the identity the DDP runtime compares at check-in; nullopt: none, and an
  // inherited one is removed (an outer launch's would refuse our own ranks).
  std::optional<std::string> dtlaunch_run_id;
  // TORCHELASTIC_RUN_ID, exported only with --export-run-id.
  std::optional<std::string> torchelastic_run_id;
  // DTLAUNCH_CUDA_DEVICE, the index within the visible devices; nullopt: no GPU bound, and an
  // inherited one is removed.
  std::optional<std::uint32_t> device;
  // CUDA_VISIBLE_DEVICES narrowed to the worker's device (--gpu-bind=isolate); nullopt: the
  // inherited value stands.
  std::optional<std::string> visible_devices;
  // DTLAUNCH_SUPERVISOR, local mode: the dtlaunch that supervises the worker.
  std::optional<std::string> supervisor;
  // OMP_NUM_THREADS and CUDA_DEVICE_ORDER=PCI_BUS_ID, each only where the user has not set it.
  std::optional<std::string> omp_num_threads;
  bool pci_device_order = false;
  // DTLAUNCH_JOB_KEY, 64 hex digits: the secret that authenticates the heartbeat's frames to the
  // job (docs/security.md); nullopt: an inherited one stands (Slurm: dtlaunch job's, or the
  // batch script's).
  std::optional<std::string> job_key;

  bool operator==(const WorkerContract&) const = default;
};

struct EnvChange {
  std::string name;
  std::optional<std::string> value;  // nullopt: remove the inherited variable
  bool operator==(const EnvChange&) const = default;
};
using EnvDelta = std::vector<EnvChange>;

// The rule for a run identity (DTLAUNCH_RUN_ID, `dtlaunch --run-id`): printable ASCII (0x20-0x7e)
// of at most kMaxRunIdBytes bytes. It is echoed in the rendezvous's messages and compared byte for
// byte across hosts, so a newline, an escape sequence or 100 KB are refused, never echoed or cut.
inline constexpr std::size_t kMaxRunIdBytes = 128;
// "" when `id` follows the rule, else what is wrong with it ("has a control character (\x1b) at
// byte 3"); the caller names the input and quotes an excerpt of the value.
std::string run_id_problem(std::string_view id);

// The changes to make to `inherited` for this worker, in the order of the table, removals last.
EnvDelta to_env(const WorkerContract& contract, const core::EnvMap& inherited);

core::EnvMap apply_env(core::EnvMap inherited, const EnvDelta& delta);

// The contract a worker finds in its environment, under dtlaunch or torchrun (which sets no
// NODE_RANK, NNODES or DTLAUNCH_* variable: their defaults apply). RANK, WORLD_SIZE, MASTER_ADDR
// and MASTER_PORT are required; an empty value counts as unset. Throws Error (bad input) with
// one line that names every missing or malformed variable, followed by `more_problems`, those
// the caller found in variables outside the contract.
WorkerContract parse_contract(const core::EnvMap& env,
                              const std::vector<std::string>& more_problems = {});

// The table: each variable dtlaunch exports, what it means, where its value comes from, and how
// to_env writes it from the contract.
struct ExportedVar {
  enum class Write {
    kSet,              // set when the contract has a value
    kSetOrRemove,      // set when it has one, else remove an inherited entry
    kUnlessInherited,  // set when it has one and the user has not set the variable
  };
  std::string_view name;
  std::string_view meaning;
  std::string_view source;  // where the value comes from, under Slurm and in local mode
  Write write = Write::kSet;
  std::optional<std::string> (*value)(const WorkerContract&) = nullptr;
};
std::span<const ExportedVar> exported_vars();

// Inherited variables that are removed from a worker's environment, with the reason.
struct RemovedVar {
  std::string_view name;
  std::string_view why;
};
std::span<const RemovedVar> removed_vars();

// The one place each name is spelled; the table above and the code below use these.
namespace env_var {
inline constexpr std::string_view kRank = "RANK";
inline constexpr std::string_view kLocalRank = "LOCAL_RANK";
inline constexpr std::string_view kWorldSize = "WORLD_SIZE";
inline constexpr std::string_view kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr std::string_view kGroupRank = "GROUP_RANK";
inline constexpr std::string_view kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr std::string_view kRoleRank = "ROLE_RANK";
inline constexpr std::string_view kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr std::string_view kRoleName = "ROLE_NAME";
inline constexpr std::string_view kNodeRank = "NODE_RANK";
inline constexpr std::string_view kNnodes = "NNODES";
inline constexpr std::string_view kMasterAddr = "MASTER_ADDR";
inline constexpr std::string_view kMasterPort = "MASTER_PORT";
inline constexpr std::string_view kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr std::string_view kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr std::string_view kTorchelasticRunId = "TORCHELASTIC_RUN_ID";
inline constexpr std::string_view kRunId = "DTLAUNCH_RUN_ID";
inline constexpr std::string_view kNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr std::string_view kOmpNumThreads = "OMP_NUM_THREADS";
inline constexpr std::string_view kCudaDevice = "DTLAUNCH_CUDA_DEVICE";
inline constexpr std::string_view kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
inline constexpr std::string_view kCudaDeviceOrder = "CUDA_DEVICE_ORDER";
inline constexpr std::string_view kSupervisor = "DTLAUNCH_SUPERVISOR";
inline constexpr std::string_view kJobKey = "DTLAUNCH_JOB_KEY";
}  // namespace env_var

// "DTLAUNCH_SUPERVISOR=<tag>": how the guardian recognises a supervised worker's descendants by
// their environment; derived from the same field to_env exports.
std::string supervisor_marker(std::string_view tag);

}  // namespace dtlaunch::contract
