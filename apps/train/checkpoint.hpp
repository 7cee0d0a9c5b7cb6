// The training checkpoint: one file holding the model, the optimizer state (SGD momentum) and
// where training stands. Written by rank 0 to a temporary name and renamed, so a reader sees the
// old checkpoint or the new one, never a torn file; sealed with a CRC-32 that is checked before
// anything is loaded (checkpoint_file.hpp). Format: docs/example.md.
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

// What decides the samples of each step: resuming with other values would replay or skip some.
struct SampleOrder {
  std::uint64_t world_size = 0;
  std::uint64_t batch_size = 0;
  std::uint64_t seed = 0;
  bool operator==(const SampleOrder&) const = default;
};

struct Progress {
  std::uint64_t epoch = 0;          // the epoch in progress (0-based)
  std::uint64_t step_in_epoch = 0;  // steps of that epoch already taken
  std::uint64_t global_step = 0;    // steps taken since the start of training
  SampleOrder order;                // of the run that took them
  bool operator==(const Progress&) const = default;
};

// What this run is: a checkpoint's progress must fit it, field by field.
struct RunShape {
  SampleOrder order;
  std::uint64_t epochs = 0;
  std::uint64_t steps_per_epoch = 0;
};

// Throws dtlaunch::train::Error (exit status 2) naming the path and the field when `p` was not
// written by a run of this shape, or is out of range for it: a step past the end of the epoch, an
// epoch past the last, a global step that does not follow from the other two.
void check_progress(const std::string& path, const Progress& p, const RunShape& shape);

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const Progress& progress);

// Verifies the file, loads it into model and optimizer (built with the same architecture and
// parameters) and returns the saved progress, range-checked against `shape`. Throws
// dtlaunch::train::Error (exit status 2) naming the path when the file is corrupt, is not a
// checkpoint of this program, or does not fit this run.
Progress load_checkpoint(const std::string& path, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer, const RunShape& shape);

// SHA-256, 64 hex digits, of every parameter and buffer of `model` in registration order: each
// one's name, dtype, shape and bytes. Two runs that end with the same digest end with the same
// weights bit for bit (docs/example.md, "The weights' digest").
std::string weights_sha256(const torch::nn::Module& model);

}  // namespace dtlaunch::train
