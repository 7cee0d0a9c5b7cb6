// The DDP step of a 25 M-parameter model on our runtime, for bench/ddp/hier.sh's step table:
// an MLP 1024-4096-4096-1024 (25.2 M float32 parameters, 101 MB of gradients), MSE on random
// data of this rank, SGD. bench/ddp/torch_mlp_step.py is PyTorch's side: the same model, data
// and SGD under torch.nn.parallel.DistributedDataParallel.
//   mlp_step STEPS WARMUP [BATCH=16] [--no-sync | --first-bucket | --separate-grads]
// --no-sync: every step under no_sync(), i.e. the same computation with no all_reduce (the
// compute-only time that the step table subtracts). --first-bucket: PyTorch's 1 MiB first
// bucket (DdpOptions::first_bucket_cap_bytes; ours has none by default). --separate-grads:
// DdpOptions::gradient_as_bucket_view off (PyTorch's default). Rank 0 prints
//   mlp-step: params P ms_per_step X exposed_ms E (the all_reduce time left after backward)
#include <dtlaunch/ddp.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ddp = dtlaunch::ddp;

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : in(register_module("in", torch::nn::Linear(1024, 4096))),
        hidden(register_module("hidden", torch::nn::Linear(4096, 4096))),
        out(register_module("out", torch::nn::Linear(4096, 1024))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return out(torch::relu(hidden(torch::relu(in(x)))));
  }
  torch::nn::Linear in, hidden, out;
};
TORCH_MODULE(Mlp);

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: mlp_step STEPS WARMUP [BATCH] [--no-sync | --first-bucket | --separate-grads]\n");
    return 2;
  }
  const int steps = std::atoi(argv[1]), warmup = std::atoi(argv[2]);
  const int64_t batch = argc > 3 && argv[3][0] != '-' ? std::atoll(argv[3]) : 16;
  const bool no_sync = std::strcmp(argv[argc - 1], "--no-sync") == 0;
  const bool first_bucket = std::strcmp(argv[argc - 1], "--first-bucket") == 0;
  const bool separate_grads = std::strcmp(argv[argc - 1], "--separate-grads") == 0;
  torch::set_num_threads(1);
  auto pg = ddp::init_process_group();
  torch::manual_seed(1);
  Mlp net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  ddp::DdpOptions options;
  if (first_bucket) options.first_bucket_cap_bytes = 1u << 20;
  options.gradient_as_bucket_view = !separate_grads;
  ddp::DistributedDataParallel model(net.ptr(), pg, options);
  torch::manual_seed(100 + static_cast<uint64_t>(pg->rank()));
  const auto x = torch::randn({batch, 1024}), y = torch::randn({batch, 1024});
  std::chrono::steady_clock::time_point t0;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      pg->barrier();
      model.reset_stats();
      t0 = std::chrono::steady_clock::now();
    }
    opt.zero_grad();
    if (no_sync) {
      auto guard = model.no_sync();
      torch::mse_loss(net->forward(x), y).backward();
    } else {
      torch::mse_loss(net->forward(x), y).backward();
    }
    opt.step();
  }
  pg->barrier();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      steps;
  int64_t params = 0;
  for (const auto& p : net->parameters()) params += p.numel();
  if (pg->rank() == 0)
    std::printf("mlp-step: params %lld ms_per_step %.1f exposed_ms %.1f\n",
                static_cast<long long>(params), ms, model.stats().exposed_seconds() * 1e3 / steps);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mlp_step: %s\n", e.what());
  return 1;
}
