// The settings of one dtlaunch-train run, as parsed from the command line (main.cpp). Plain
// data with no Torch types, so that the CLI translation unit stays cheap to compile.
#pragma once

#include <cstdint>
#include <string>

namespace dtlaunch::train {

struct TrainConfig {
  std::string data_dir;   // gzipped or plain Fashion-MNIST IDX files
  std::string cache_dir;  // where the gzipped files are unpacked
  std::uint64_t epochs = 2;
  std::uint64_t max_steps =
      0;  // optimizer steps over the whole run, resumed ones included; 0: no cap
  std::uint64_t batch_size = 64;  // per rank
  double lr = 0.03;
  double momentum = 0.9;
  std::uint64_t seed = 0;
  int threads = 1;               // intra-op threads per rank: ranks share the node's cores
  std::string backend = "gloo";  // gloo | nccl | auto (the model itself stays on the CPU)
  std::uint64_t log_every = 50;  // steps between rank 0's progress lines; 0: none
  std::string checkpoint;        // empty: no checkpoints (a stop signal then just stops)
  bool resume = false;           // load `checkpoint` when it exists
  // Steps between checkpoints inside an epoch (0: epoch ends and stop signals only): a restart
  // after a lost node loses at most this many steps.
  std::uint64_t checkpoint_every = 0;
  // Steps between the collective that asks every rank whether a stop signal arrived. 0 turns
  // the check off (benchmarks only: the program then ignores SIGUSR1/SIGTERM once start-up is
  // over, until the end).
  std::uint64_t stop_check_every = 1;
  // Benchmark mode: this many random samples per rank (fixed seed) instead of Fashion-MNIST,
  // no evaluation, and a timing line at the end.
  std::uint64_t synthetic = 0;
  std::uint64_t warmup_steps = 10;  // steps left out of the timing line
  double bucket_cap_mb = 25.0;      // DDP gradient bucket size, as PyTorch's bucket_cap_mb
  // How long the ranks wait for each other at start-up (InitOptions::rendezvous_timeout).
  double rendezvous_timeout_s = 300.0;
};

// Runs the whole training program on this rank (the process group comes from the environment:
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). Returns the process exit status: 0 when
// training finished, kExitCheckpointed (75) when a stop signal ended it at a step boundary.
// Errors are thrown (dtlaunch::train::Error for bad input, std::exception from LibTorch otherwise).
int run_training(const TrainConfig& config);

}  // namespace dtlaunch::train
