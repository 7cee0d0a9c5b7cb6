// WorkerEnv: the launch contract read from the environment (dtlaunch's, or torchrun's).
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp {
namespace {

// Collects every problem, so that one line names all of them rather than the first only.
class Reader {
 public:
  explicit Reader(const std::map<std::string, std::string>& vars) : vars_(vars) {}

  // An empty value counts as unset, as it does for the launcher (docs/environment.md).
  std::optional<int> number(const char* name, bool required, std::uint64_t max) {
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) {
      if (required) missing_.push_back(name);
      return std::nullopt;
    }
    if (auto v = parse_uint(it->second, max)) return static_cast<int>(*v);
    problem(std::string(name) + "='" + excerpt(it->second) + "' is not an integer in 0.." +
            std::to_string(max));
    return std::nullopt;
  }

  std::optional<std::string> text(const char* name, bool required) {
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) {
      if (required) missing_.push_back(name);
      return std::nullopt;
    }
    return it->second;
  }

  void problem(std::string what) { problems_.push_back(std::move(what)); }

  // Throws one line: "dtlaunch ddp: missing RANK, MASTER_PORT; WORLD_SIZE='x' is not ...".
  void throw_if_any() const {
    if (missing_.empty() && problems_.empty()) return;
    std::string msg = "dtlaunch ddp: bad launch environment: ";
    if (!missing_.empty()) {
      msg += "missing ";
      for (size_t i = 0; i < missing_.size(); ++i) msg += (i ? ", " : "") + missing_[i];
      msg += " (set by dtlaunch or torchrun)";
    }
    for (size_t i = 0; i < problems_.size(); ++i) {
      msg += (i || !missing_.empty()) ? "; " : "";
      msg += problems_[i];
    }
    throw Error(ErrorKind::kConfig, msg);
  }

 private:
  const std::map<std::string, std::string>& vars_;
  std::vector<std::string> missing_;
  std::vector<std::string> problems_;
};

constexpr std::uint64_t kMaxRanks = 1u << 24;

}  // namespace

WorkerEnv WorkerEnv::from_variables(const std::map<std::string, std::string>& vars) {
  Reader in(vars);
  auto rank = in.number("RANK", true, kMaxRanks - 1);
  auto world = in.number("WORLD_SIZE", true, kMaxRanks);
  auto local_rank = in.number("LOCAL_RANK", false, kMaxRanks - 1);
  auto local_world = in.number("LOCAL_WORLD_SIZE", false, kMaxRanks);
  auto device = in.number("DTLAUNCH_CUDA_DEVICE", false, 1023);
  auto addr = in.text("MASTER_ADDR", true);
  auto port = in.number("MASTER_PORT", true, 65535);

  if (world && *world == 0) in.problem("WORLD_SIZE='0' must be at least 1");
  if (rank && world && *world > 0 && *rank >= *world)
    in.problem("RANK=" + std::to_string(*rank) +
               " is not below WORLD_SIZE=" + std::to_string(*world));
  if (local_world && *local_world == 0) in.problem("LOCAL_WORLD_SIZE='0' must be at least 1");
  if (local_rank && local_world && *local_world > 0 && *local_rank >= *local_world)
    in.problem("LOCAL_RANK=" + std::to_string(*local_rank) +
               " is not below LOCAL_WORLD_SIZE=" + std::to_string(*local_world));
  if (port && *port == 0) in.problem("MASTER_PORT='0' is not a usable port");
  auto use_libuv = in.text("USE_LIBUV", false);
  if (use_libuv && *use_libuv != "0" && *use_libuv != "1")
    in.problem("USE_LIBUV='" + excerpt(*use_libuv) + "' must be 0 or 1");
  in.throw_if_any();

  WorkerEnv env;
  env.rank = *rank;
  env.world_size = *world;
  env.local_rank = local_rank.value_or(0);
  env.local_world_size = local_world.value_or(1);
  // torchrun exports no device index: one GPU per local rank, as PyTorch's examples assume.
  env.device_index = device.value_or(env.local_rank);
  env.master_addr = *addr;
  env.master_port = *port;
  if (auto it = vars.find("GLOO_SOCKET_IFNAME"); it != vars.end())
    env.gloo_socket_ifname = it->second;
  env.store_use_libuv = use_libuv.value_or("1") == "1";
  if (auto it = vars.find("DTLAUNCH_RUN_ID"); it != vars.end()) env.run_id = it->second;
  return env;
}

WorkerEnv WorkerEnv::from_environment() {
  static constexpr const char* kNames[] = {
      "RANK",        "WORLD_SIZE",     "LOCAL_RANK",           "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT",    "DTLAUNCH_CUDA_DEVICE", "GLOO_SOCKET_IFNAME",
      "USE_LIBUV",   "DTLAUNCH_RUN_ID"};
  std::map<std::string, std::string> vars;
  for (const char* name : kNames)
    if (const char* value = ::getenv(name)) vars.emplace(name, value);
  return from_variables(vars);
}

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

const char* to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

}  // namespace dtlaunch::ddp
