// Our side of bench/ddp/phases.sh: dtlaunch-train --synthetic's step, phase by phase. The same
// model (apps/train/model.hpp), data recipe, loop and SGD as dtlaunch-train and
// bench/ddp/torch_ddp.py --phases, with a steady clock read between the phases:
//   data      index_select of the batch
//   zero      optimizer zero_grad
//   forward   model forward and the loss
//   backward  loss.backward(), which includes DDP's wait for the all-reduces and the copy back
//   step      optimizer step
//   item      loss.item()
// and the Reducer's own comm/overlap spans (DdpStats, defined as PyTorch's Reducer defines
// them). Prints on rank 0, after the warm-up steps:
//   timing: steps S ms/step X
//   phases: data_ms .. zero_ms .. forward_ms .. backward_ms .. step_ms .. item_ms .. comm_ms ..
//           overlap_ms .. buckets N loss L
// --device cuda puts the model and the data on the GPU (the group is then NCCL where this build
// has it) and synchronises the device at every clock read.
#include <dtlaunch/ddp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "model.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace ddp = dtlaunch::ddp;

struct Args {
  std::int64_t synthetic = 0;
  std::int64_t batch = 64;
  std::int64_t max_steps = 0;
  std::int64_t warmup = 10;
  int threads = 1;
  std::uint64_t seed = 0;
  double lr = 0.03;
  double momentum = 0.9;
  double bucket_cap_mb = 25.0;
  std::string device = "cpu";
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ddp_phases: %s\nusage: ddp_phases --synthetic N --max-steps S [--batch-size B] "
               "[--warmup-steps W] [--threads T] [--bucket-cap-mb M] [--seed S] [--lr X] "
               "[--momentum X] [--device cpu|cuda]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + key).c_str());
    const char* v = argv[++i];
    if (key == "--device") {
      a.device = v;
      if (a.device != "cpu" && a.device != "cuda") usage("--device: expected cpu or cuda");
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0') usage((key + " " + v + ": not a number").c_str());
    if (key == "--synthetic")
      a.synthetic = static_cast<std::int64_t>(x);
    else if (key == "--batch-size")
      a.batch = static_cast<std::int64_t>(x);
    else if (key == "--max-steps")
      a.max_steps = static_cast<std::int64_t>(x);
    else if (key == "--warmup-steps")
      a.warmup = static_cast<std::int64_t>(x);
    else if (key == "--threads")
      a.threads = static_cast<int>(x);
    else if (key == "--seed")
      a.seed = static_cast<std::uint64_t>(x);
    else if (key == "--lr")
      a.lr = x;
    else if (key == "--momentum")
      a.momentum = x;
    else if (key == "--bucket-cap-mb")
      a.bucket_cap_mb = x;
    else
      usage(("unknown option " + key).c_str());
  }
  if (a.synthetic <= 0 || a.batch <= 0 || a.max_steps <= a.warmup || a.warmup < 0)
    usage("need --synthetic > 0, --batch-size > 0 and --max-steps > --warmup-steps >= 0");
  return a;
}

bool on_gpu = false;

// Seconds since `mark`, which moves to now; on a GPU once the queued work is done.
double since(Clock::time_point& mark) {
  if (on_gpu) torch::cuda::synchronize();
  const auto now = Clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  at::set_num_threads(a.threads);
  std::shared_ptr<ddp::ProcessGroup> pg = ddp::init_process_group();
  const int rank = pg->rank();
  on_gpu = a.device == "cuda";
  const torch::Device dev =
      on_gpu ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(pg->env().device_index))
             : torch::Device(torch::kCPU);

  // make_synthetic() in apps/train/trainer.cpp.
  auto gen = at::detail::createCPUGenerator(a.seed + static_cast<std::uint64_t>(rank));
  at::Tensor images = at::randn({a.synthetic, 1, 28, 28}, gen);
  at::Tensor labels = at::randint(10, {a.synthetic}, gen, at::kLong);
  images = images.to(dev);
  labels = labels.to(dev);

  torch::manual_seed(a.seed);
  dtlaunch::train::FashionCnn net;
  net->to(dev);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(a.lr).momentum(a.momentum));
  ddp::DdpOptions dopts;
  dopts.bucket_cap_bytes = std::max<size_t>(1, static_cast<size_t>(a.bucket_cap_mb * 1024 * 1024));
  ddp::DistributedDataParallel model(net.ptr(), pg, dopts);

  const std::int64_t steps_per_epoch = (a.synthetic + a.batch - 1) / a.batch;
  const at::Tensor order = at::arange(a.synthetic, at::TensorOptions(at::kLong).device(dev));
  enum { kData, kZero, kForward, kBackward, kStep, kItem, kPhases };
  double phase[kPhases] = {};
  double loss_sum = 0;
  Clock::time_point t0{};
  for (std::int64_t step = 0; step < a.max_steps; ++step) {
    if (step == a.warmup) {
      model.reset_stats();
      for (double& p : phase) p = 0;
      if (on_gpu) torch::cuda::synchronize();
      t0 = Clock::now();
    }
    Clock::time_point mark = Clock::now();
    const std::int64_t first = (step % steps_per_epoch) * a.batch;
    at::Tensor idx = order.slice(0, first, std::min(first + a.batch, a.synthetic));
    at::Tensor x = images.index_select(0, idx);
    at::Tensor y = labels.index_select(0, idx);
    phase[kData] += since(mark);
    opt.zero_grad();
    phase[kZero] += since(mark);
    at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    phase[kForward] += since(mark);
    loss.backward();
    phase[kBackward] += since(mark);
    opt.step();
    phase[kStep] += since(mark);
    loss_sum += loss.item<double>();
    phase[kItem] += since(mark);
  }
  const double steps = static_cast<double>(a.max_steps - a.warmup);
  const double ms = 1e3 / steps;
  if (rank == 0) {
    const ddp::DdpStats st = model.stats();
    std::printf("timing: steps %.0f ms/step %.3f\n", steps,
                ms * std::chrono::duration<double>(Clock::now() - t0).count());
    std::printf(
        "phases: data_ms %.3f zero_ms %.3f forward_ms %.3f backward_ms %.3f step_ms %.3f "
        "item_ms %.3f comm_ms %.3f overlap_ms %.3f buckets %zu loss %.4f\n",
        ms * phase[kData], ms * phase[kZero], ms * phase[kForward], ms * phase[kBackward],
        ms * phase[kStep], ms * phase[kItem], ms * st.comm_span_seconds,
        ms * st.overlap_span_seconds, model.buckets().size(), loss_sum / a.max_steps);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ddp_phases: %s\n", e.what());
  return 1;
}
