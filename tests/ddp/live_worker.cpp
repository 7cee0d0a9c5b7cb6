// One rank of a live-recovery test (tests/ddp/live_test.sh): a small MLP with SGD and momentum
// trained through LiveRun::step on data that depends only on (step, rank), so that a run with a
// rank replaced must end with the fault-free run's weights, bit for bit.
//
//   LIVE_STEPS=N        steps to train (default 30)
//   LIVE_KILL=R:S,...   rank R SIGKILLs itself as it begins step S, once: the first process to
//                       create LIVE_MARKS/R-S (default /tmp) dies, a replacement included
//   LIVE_STEP_MS=M      each step sleeps M ms first (a fault then lands mid-run)
//   LIVE_HIDDEN=H       hidden width (default 64)
//   LIVE_LOG_STEPS=1    "step S done at T" after each completed step (T: Unix time, seconds)
//   LIVE_DEVICE=group   the model on the group's device (cuda:N under NCCL), not the CPU
//
// Prints "pid PID rank R [replacement] backend gloo|nccl" at start, "recovered before step S
// (generation G)" after each recovery, and at the end "done rank R pid PID step S generation G
// replacement 0|1"; rank 0 then prints "weights sha256 HEX". Exits 76 on a loss it could not
// recover from, 3 on any other error.
#include <dtlaunch/ddp.h>
#include <fcntl.h>
#include <signal.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/hmac.hpp"
#include "core/text.hpp"

namespace ddp = dtlaunch::ddp;

namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::stoll(v) : fallback;
}

std::string digest(const torch::nn::Module& model) {
  dtlaunch::core::Sha256 hash;
  for (const auto& p : model.named_parameters(true)) {
    const at::Tensor t = p.value().detach().to(at::kCPU).contiguous();
    hash.update(p.key() + "\n");
    hash.update(std::span<const uint8_t>(static_cast<const uint8_t*>(t.data_ptr()),
                                         t.numel() * t.element_size()));
  }
  return dtlaunch::core::to_hex(hash.finish());
}

// True for the first process to ask with this path.
bool once(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

int run() {
  const int64_t steps = env_int("LIVE_STEPS", 30);
  const int64_t step_ms = env_int("LIVE_STEP_MS", 0);
  const int64_t hidden = env_int("LIVE_HIDDEN", 64);
  const bool log_steps = env_int("LIVE_LOG_STEPS", 0) == 1;
  std::vector<std::pair<int, int64_t>> kills;
  if (const char* k = std::getenv("LIVE_KILL"))
    for (std::string rest = k; !rest.empty();) {
      int r = -1;
      long s = -1;
      if (std::sscanf(rest.c_str(), "%d:%ld", &r, &s) == 2) kills.emplace_back(r, s);
      const size_t comma = rest.find(',');
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
  const std::string marks = std::getenv("LIVE_MARKS") ? std::getenv("LIVE_MARKS") : "/tmp";
  const char* device_name = std::getenv("LIVE_DEVICE");
  const bool on_group_device = device_name && std::string(device_name) == "group";

  torch::manual_seed(7);
  auto model = std::make_shared<torch::nn::SequentialImpl>(
      torch::nn::Linear(32, hidden), torch::nn::ReLU(), torch::nn::Dropout(0.1),
      torch::nn::Linear(hidden, 10));
  int64_t step = 0;
  ddp::TrainingState state(step);
  // The state is registered before the group exists: the model moves to the device NCCL's
  // group will use (kAuto picks NCCL where a GPU is) before its optimizer is made.
  const at::Device device =
      on_group_device && ddp::nccl_available()
          ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(
                                      ddp::WorkerEnv::from_environment().device_index))
          : at::Device(at::kCPU);
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  state.add("model", *model).add("optimizer", opt);

  ddp::LiveRun live(state);
  const int rank = live.group()->rank();
  const int world = live.group()->size();
  std::printf("pid %d rank %d%s backend %s\n", static_cast<int>(::getpid()), rank,
              live.replacement() ? " replacement" : "",
              live.group()->backend() == ddp::Backend::kNccl ? "nccl" : "gloo");
  std::fflush(stdout);
  ddp::DistributedDataParallel net(model, live.group());

  while (step < steps) {
    const bool done = live.step([&] {
      for (const auto& [r, s] : kills)
        if (r == rank && s == step &&
            once(marks + "/" + std::to_string(r) + "-" + std::to_string(s)))
          ::kill(::getpid(), SIGKILL);
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(step * world + rank));
      const at::Tensor x = at::randn({16, 32}, gen).to(device);
      const at::Tensor y = at::randint(10, {16}, gen, at::kLong).to(device);
      opt.zero_grad();
      const at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
      ++step;
    });
    if (done && log_steps) {
      const double t =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      std::printf("step %ld done at %.3f\n", static_cast<long>(step), t);
      std::fflush(stdout);
    }
    if (!done) {
      std::printf("recovered before step %ld (generation %d)\n", static_cast<long>(step),
                  live.generation());
      std::fflush(stdout);
    }
  }
  std::printf("done rank %d pid %d step %ld generation %d replacement %d\n", rank,
              static_cast<int>(::getpid()), static_cast<long>(step), live.generation(),
              live.replacement() ? 1 : 0);
  if (rank == 0) std::printf("weights sha256 %s\n", digest(*model).c_str());
  std::fflush(stdout);
  live.group()->barrier();  // nobody leaves while another rank still needs it
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return e.kind() == ddp::ErrorKind::kPeerLost ? ddp::kExitPeerLost : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 3;
  }
}
