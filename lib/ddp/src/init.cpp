// init_process_group: the environment, the rendezvous, then the backend.
#include <csignal>

#include "core/error.hpp"
#include "internal.hpp"

namespace dtlaunch::ddp {

bool nccl_available() noexcept {
#ifdef DTLAUNCH_DDP_HAVE_NCCL
  return detail::cuda_device_count() > 0;
#else
  return false;
#endif
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  return init_process_group(WorkerEnv::from_environment(), options);
}

std::shared_ptr<ProcessGroup> init_process_group(const WorkerEnv& env, const InitOptions& options) {
  if (options.timeout.count() <= 0)
    throw Error(ExitCode::kBadInput, "dtlaunch ddp: InitOptions::timeout must be positive");
  if (options.rendezvous_timeout.count() < 0)
    throw Error(ExitCode::kBadInput,
                "dtlaunch ddp: InitOptions::rendezvous_timeout must not be negative");
  if (options.progress_every.count() < 0)
    throw Error(ExitCode::kBadInput,
                "dtlaunch ddp: InitOptions::progress_every must not be negative");
  Backend backend = options.backend;
  if (backend == Backend::kAuto) backend = nccl_available() ? Backend::kNccl : Backend::kGloo;
#ifndef DTLAUNCH_DDP_HAVE_NCCL
  if (backend == Backend::kNccl)
    throw Error(ExitCode::kBadInput,
                "dtlaunch ddp: the nccl backend was requested, but this build of dtlaunch::ddp has "
                "none (CUDA toolkit or libnccl not found when it was built)");
#endif
  // Gloo and the TCPStore write to sockets without MSG_NOSIGNAL: with SIGPIPE at its default, a
  // peer that died kills this process silently (status 141) instead of failing the collective
  // with a message. The Python interpreter ignores SIGPIPE, which is why PyTorch reports it.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  auto store = detail::rendezvous(
      env, options.rendezvous_timeout.count() > 0 ? options.rendezvous_timeout : options.timeout,
      options.progress_every);
  // The rendezvous bounded the store's waits by its own timeout; Gloo and NCCL use the store
  // afterwards under the collectives' timeout.
  store->setTimeout(options.timeout);
#ifdef DTLAUNCH_DDP_HAVE_NCCL
  if (backend == Backend::kNccl) return detail::make_nccl_group(env, options, std::move(store));
#endif
  return detail::make_gloo_group(env, options, std::move(store));
}

}  // namespace dtlaunch::ddp
