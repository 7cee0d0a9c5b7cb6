// The random generators a training step draws from (LiveRun, TrainingState): the CPU's, and the
// CUDA generator of this rank's device where LibTorch has CUDA. A step redone after a recovery
// starts from their states, and a replacement gets a survivor's, so that dropout draws the same
// numbers as in a run without the fault.
#pragma once

#include <ATen/core/Tensor.h>

namespace dtlaunch::ddp::detail {

struct RngStates {
  at::Tensor cpu;
  at::Tensor cuda;  // undefined without CUDA
};

RngStates rng_states();
// Sets what `states` holds; a CUDA state where this process has no CUDA device is left alone.
void set_rng_states(const RngStates& states);

}  // namespace dtlaunch::ddp::detail
