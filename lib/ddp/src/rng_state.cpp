#include "rng_state.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dtlaunch/ddp.h>

#include <mutex>

namespace dtlaunch::ddp::detail {
namespace {

// This rank's CUDA device (DTLAUNCH_CUDA_DEVICE, else LOCAL_RANK: the one NCCL's group uses), or
// -1 where LibTorch has no CUDA or the environment names no device there. Read once.
int cuda_device() {
  static const int device = [] {
    if (!at::hasCUDA()) return -1;
    try {
      const int d = WorkerEnv::from_environment().device_index;
      return d >= 0 && d < at::detail::getCUDAHooks().getNumGPUs() ? d : -1;
    } catch (const std::exception&) {
      return -1;
    }
  }();
  return device;
}

at::Generator cuda_generator(int device) {
  return at::globalContext().defaultGenerator(
      at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

at::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

RngStates rng_states() {
  RngStates out;
  out.cpu = state_of(at::detail::getDefaultCPUGenerator());
  if (const int device = cuda_device(); device >= 0) out.cuda = state_of(cuda_generator(device));
  return out;
}

void set_rng_states(const RngStates& states) {
  if (states.cpu.defined()) set_state(at::detail::getDefaultCPUGenerator(), states.cpu);
  if (const int device = cuda_device(); device >= 0 && states.cuda.defined())
    set_state(cuda_generator(device), states.cuda);
}

}  // namespace dtlaunch::ddp::detail
