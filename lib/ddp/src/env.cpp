// WorkerEnv: the launch contract read from the environment (dtlaunch's, or torchrun's), by the
// same parser the launcher's writer is tested against (contract/contract.hpp).
#include <optional>
#include <string_view>

#include "contract/contract.hpp"
#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/names.hpp"
#include "core/text.hpp"
#include "dtlaunch/ddp.h"

extern char** environ;

namespace dtlaunch::ddp {
namespace {

WorkerEnv from_env_map(const core::EnvMap& vars) {
  // USE_LIBUV, DTLAUNCH_STORE_HOSTED and GLOO_SOCKET_IFNAME are the runtime's own knobs, not the
  // launcher's contract; a bad value is still named in the same line as the contract's problems.
  std::vector<std::string> problems;
  const auto checked = [&](const contract::Setting& setting) {
    const auto value = contract::read_text(vars, setting);
    if (value)
      if (std::string problem = contract::setting_problem(setting, *value); !problem.empty())
        problems.push_back(std::move(problem));
    return value;
  };
  const auto use_libuv = checked(contract::setting::kUseLibuv);
  const auto store_hosted = checked(contract::setting::kStoreHosted);
  contract::WorkerContract contract;
  try {
    contract = contract::parse_contract(vars, problems);
  } catch (const core::Error& e) {
    throw Error(ErrorKind::kConfig, std::string("dtlaunch ddp: ") + e.what());
  }
  WorkerEnv env;
  env.rank = static_cast<int>(contract.rank);
  env.world_size = static_cast<int>(contract.world_size);
  env.local_rank = static_cast<int>(contract.local_rank);
  env.local_world_size = static_cast<int>(contract.local_world_size);
  env.node_rank = static_cast<int>(contract.node_rank);
  // torchrun exports no device index: one GPU per local rank, as PyTorch's examples assume.
  env.device_index = static_cast<int>(contract.device.value_or(contract.local_rank));
  env.master_addr = contract.master_addr;
  env.master_port = contract.master_port;
  env.gloo_socket_ifname =
      contract::read_text(vars, contract::setting::kGlooSocketIfname).value_or("");
  env.store_use_libuv =
      use_libuv.value_or(std::string(contract::setting::kUseLibuv.fallback)) == "1";
  env.store_hosted = store_hosted.value_or("0") == "1";
  env.run_id = contract.dtlaunch_run_id.value_or("");
  env.job_key = contract.job_key.value_or("");
  return env;
}

}  // namespace

WorkerEnv WorkerEnv::from_variables(const std::map<std::string, std::string>& vars) {
  core::EnvMap env;
  for (const auto& [name, value] : vars) env.set(name, value);
  return from_env_map(env);
}

WorkerEnv WorkerEnv::from_environment() {
  return from_env_map(core::EnvMap::from_environ(environ));
}

constexpr core::Named<Backend> kBackendNames[] = {
    {Backend::kAuto, "auto"}, {Backend::kGloo, "gloo"}, {Backend::kNccl, "nccl"}};

const char* to_string(Backend backend) noexcept {
  return core::name_of(backend, kBackendNames).data();
}

constexpr core::Named<ReduceOp> kReduceOpNames[] = {{ReduceOp::kSum, "sum"},
                                                    {ReduceOp::kAvg, "avg"},
                                                    {ReduceOp::kMin, "min"},
                                                    {ReduceOp::kMax, "max"}};

const char* to_string(ReduceOp op) noexcept {
  return core::name_of(op, kReduceOpNames).data();
}

}  // namespace dtlaunch::ddp
