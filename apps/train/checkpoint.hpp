// The training checkpoint: one file holding the model, the optimizer state (SGD momentum) and
// where training stands. Written by rank 0 to a temporary name and renamed, so a reader sees the
// old checkpoint or the new one, never a torn file. Format: docs/example.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace dtlaunch::train {

struct Progress {
  std::uint64_t epoch = 0;          // the epoch in progress (0-based)
  std::uint64_t step_in_epoch = 0;  // steps of that epoch already taken
  std::uint64_t global_step = 0;    // steps taken since the start of training
  // The run's shape: resuming with another one would replay or skip samples.
  std::uint64_t world_size = 0;
  std::uint64_t batch_size = 0;
  std::uint64_t seed = 0;
  bool operator==(const Progress&) const = default;
};

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const Progress& progress);

// Loads the file into model and optimizer (built with the same architecture and parameters)
// and returns the saved progress. Throws dtlaunch::train::Error (exit status 2) naming the path when
// the file is not a checkpoint of this program.
Progress load_checkpoint(const std::string& path, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer);

}  // namespace dtlaunch::train
