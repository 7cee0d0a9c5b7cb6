// init_process_group: the environment, the rendezvous, then the backend.
#include <csignal>
#include <cstdio>

#include "internal.hpp"
#include "monitor.hpp"
#include "peer_watch.hpp"
#include "settings.hpp"
#include "shm_reduce.hpp"

namespace dtlaunch::ddp {

bool nccl_available() noexcept {
#if DTLAUNCH_DDP_HAVE_NCCL
  return detail::cuda_device_count() > 0;
#else
  return false;
#endif
}

namespace {

// However start-up ends, the heartbeat's backstop for a blocked start-up stands down.
struct StartupOver {
  detail::PeerWatch* watch;
  ~StartupOver() {
    if (watch != nullptr) watch->startup_over();
  }
};

}  // namespace

namespace detail {

FormedGroup form_group(const WorkerEnv& env, const RuntimeSettings& read,
                       const InitOptions& options, StartupPhases& phases,
                       c10::intrusive_ptr<c10d::Store> generation_store,
                       std::shared_ptr<PeerWatch>* watch_out) {
  if (options.timeout.count() <= 0)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: InitOptions::timeout must be positive");
  if (options.rendezvous_timeout.count() < 0)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: InitOptions::rendezvous_timeout must not be negative");
  if (options.progress_every.count() < 0)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: InitOptions::progress_every must not be negative");
  Backend backend = options.backend;
  if (backend == Backend::kAuto) backend = nccl_available() ? Backend::kNccl : Backend::kGloo;
#if !DTLAUNCH_DDP_HAVE_NCCL
  if (backend == Backend::kNccl)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: the nccl backend was requested, but this build of dtlaunch::ddp has "
                "none (CUDA toolkit or libnccl not found when it was built)");
#endif
#if !DTLAUNCH_DDP_HAVE_GLOO
  if (backend == Backend::kGloo)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: the gloo backend was requested, but this build of dtlaunch::ddp has "
                "none (its LibTorch came without Gloo's headers, as a pip torch wheel does: "
                "configure with -DDTLAUNCH_GLOO_INCLUDE_DIR=DIR, see docs/install.md)");
#endif
  // Gloo and the TCPStore write to sockets without MSG_NOSIGNAL: with SIGPIPE at its default, a
  // peer that died kills this process silently (status 141) instead of failing the collective
  // with a message. The Python interpreter ignores SIGPIPE, which is why PyTorch reports it.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  const detail::MonitorSettings& settings = read.monitor;
  InitOptions resolved = options;
  resolved.shm_all_reduce = options.shm_all_reduce && read.shm_all_reduce;
  // DTLAUNCH_DDP_CHECK adds a collective to every collective: it must be on everywhere or
  // nowhere (DTLAUNCH_DDP_SHM is agreed by ShmAllReduce::create instead: off when any rank has it
  // off).
  const std::string agreed =
      std::string(contract::setting::kCheck.name) + "=" + (settings.check ? "1" : "0");
  auto peer_watch = detail::PeerWatch::prepare(env, settings.heartbeat_timeout);
  if (watch_out != nullptr) *watch_out = peer_watch;
  const StartupOver startup_over{peer_watch.get()};
  auto store = detail::rendezvous(
      env, options.rendezvous_timeout.count() > 0 ? options.rendezvous_timeout : options.timeout,
      options.progress_every, phases, agreed, peer_watch.get(), std::move(generation_store));
  // The rendezvous bounded the store's waits by its own timeout; Gloo and NCCL use the store
  // afterwards under the collectives' timeout.
  store->setTimeout(options.timeout);
  auto monitor = std::make_shared<detail::Monitor>(env, store, options.timeout, settings);
  std::shared_ptr<ProcessGroup> group;
  try {
    detail::GroupParts parts{resolved, store, monitor,
                             peer_watch ? peer_watch->abort_flag() : nullptr, read.hier_all_reduce};
#if DTLAUNCH_DDP_HAVE_NCCL
    if (backend == Backend::kNccl) group = detail::make_nccl_group(env, parts);
#endif
#if DTLAUNCH_DDP_HAVE_GLOO
    if (!group) group = detail::make_gloo_group(env, std::move(parts));
#endif
  } catch (const Error& e) {
    // A rank lost during the backend's connect: the heartbeat's verdict shut the connections
    // down, or the backend saw the loss a moment before it.
    if (peer_watch && e.kind() != ErrorKind::kConfig &&
        peer_watch->wait_lost(std::chrono::milliseconds(1500)))
      throw monitor->record(peer_watch->error());
    throw monitor->record(e);
  }
  monitor->start_watcher();
  if (peer_watch) {
    peer_watch->start(monitor);
    detail::attach_peer_watch(*group, peer_watch);
  }
  phases.backend_ready = std::chrono::steady_clock::now();
  const std::string line = monitor->startup_line(phases);
  if (!line.empty()) detail::say(line);
  return {group, store, peer_watch};
}

}  // namespace detail

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  detail::StartupPhases phases;
  phases.start = std::chrono::steady_clock::now();
  const WorkerEnv env = WorkerEnv::from_environment();
  phases.env_read = std::chrono::steady_clock::now();
  // Read before the rendezvous, so that a malformed variable fails every rank at once.
  const auto read = detail::RuntimeSettings::from_environment(env.world_size);
  return detail::form_group(env, read, options, phases).group;
}

std::shared_ptr<ProcessGroup> init_process_group(const WorkerEnv& env, const InitOptions& options) {
  detail::StartupPhases phases;
  phases.start = phases.env_read = std::chrono::steady_clock::now();
  const auto read = detail::RuntimeSettings::from_environment(env.world_size);
  return detail::form_group(env, read, options, phases).group;
}

}  // namespace dtlaunch::ddp
