// Declarations shared by the implementation files of dtlaunch::ddp; not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "ddp_config.hpp"
#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// The clock of the runtime's deadlines, and the unit of its timeouts.
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The runtime's one way to write a diagnostic line on stderr (docs/architecture.md): `line`
// whole ("dtlaunch ddp: ..."; the newline is added) in one write(2), so that lines from several
// threads and ranks sharing a terminal or a pipe never interleave inside a line, and nothing waits
// in stdio's buffer when the process then ends with _Exit.
void say(std::string_view line);

// Whether request_stop() was called; stopped(WHAT): the error that ends the wait WHAT then.
bool stop_requested() noexcept;
Error stopped(const std::string& what);

// The first line of an exception's message: c10 errors append a C++ stack trace.
std::string first_line(const std::exception& e);
// A store value from text and back: the store holds bytes, the runtime's records are text.
inline std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
inline std::string text(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}
// "ff ff 03": a peer's bytes as the messages that name them show them.
std::string hex_bytes(const std::string& b);
// Whether `fd` became ready for `events` (poll's) by `deadline`; false on a poll error too.
bool poll_until(int fd, short events, Clock::time_point deadline);
// kTimeout, kPeerLost or kBackend, from a Gloo, NCCL or store message.
ErrorKind classify_backend_failure(const std::string& message);

// Hosts (rank 0) or reaches the TCP store at MASTER_ADDR:MASTER_PORT and waits until every rank
// has checked in with rank 0's identity (DTLAUNCH_RUN_ID, WORLD_SIZE), or throws naming how many
// arrived, the missing ranks and the address, or both identities. Prints a progress line to
// stderr every `progress_every` (0: never) while it waits. `agreed_settings` ("NAME=VALUE ...",
// the variables every rank must set alike) is compared with rank 0's: a difference fails every
// rank with one kConfig line naming the ranks. With `watch` (the heartbeat, peer_watch.hpp), this
// rank's heartbeat starts once it has claimed its place, and a rank lost from then on fails the
// rendezvous with the heartbeat's kPeerLost naming it. With `generation_store` (a live
// recovery's new generation: a prefix of the store the job already uses) no store is reached or
// hosted; the rendezvous runs in it as in a fresh one.
struct StartupPhases;
class PeerWatch;
c10::intrusive_ptr<c10d::Store> rendezvous(const WorkerEnv& env, std::chrono::milliseconds timeout,
                                           std::chrono::milliseconds progress_every,
                                           StartupPhases& phases,
                                           const std::string& agreed_settings,
                                           PeerWatch* watch = nullptr,
                                           c10::intrusive_ptr<c10d::Store> generation_store = {});

// init_process_group's work, with the runtime's settings read once (settings.hpp), returning
// besides the group what a live recovery (live.cpp) keeps or reads: the store the rendezvous
// opened (on rank 0, with its server) and the heartbeat (null without one). With
// `generation_store`, the rendezvous runs in that prefix of the job's store. `watch_out` gets the
// heartbeat as soon as it exists: after a failure it names the lost ranks.
struct FormedGroup {
  std::shared_ptr<ProcessGroup> group;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<PeerWatch> watch;
};
struct RuntimeSettings;
FormedGroup form_group(const WorkerEnv& env, const RuntimeSettings& settings,
                       const InitOptions& options, StartupPhases& phases,
                       c10::intrusive_ptr<c10d::Store> generation_store = {},
                       std::shared_ptr<PeerWatch>* watch_out = nullptr);

// Whether `group` is a live replacement's LiveGroup whose first DistributedDataParallel is being
// built: true once, and that constructor then skips its broadcast (live.cpp).
bool take_initial_broadcast_skip(ProcessGroup& group);

// Another client connection to the store that rank 0 hosts (a client is for one thread at a
// time), on the server kind env asks for, as the rendezvous opens it.
c10::intrusive_ptr<c10d::Store> connect_store(const WorkerEnv& env,
                                              std::chrono::milliseconds timeout);

// "the store at ADDR:PORT is unreachable (connect: Connection refused), so rank 0 (HOST) is gone"
// when a fresh connection to MASTER_ADDR:MASTER_PORT fails within `within`; "" when it succeeds.
std::string store_host_gone(const WorkerEnv& env, std::chrono::milliseconds within);

// "0-3,7,9-10", cut after `limit` ranges with ", ... (N in all)" (core's compact_ranges).
std::string format_ranks(const std::vector<int>& ranks, size_t limit = 16);

// What a backend's group is made of besides this rank's environment: the options it was asked
// for, the store the rendezvous opened, the runtime's monitor, and the heartbeat's verdict
// (null without a heartbeat): set on a lost peer, it makes a pending collective fail with
// kPeerLost (the shared-memory all_reduce's wait; NCCL's, after ncclCommAbort).
class Monitor;
struct GroupParts {
  InitOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<Monitor> monitor;
  std::shared_ptr<const std::atomic<bool>> peer_lost;
  bool hier_all_reduce = false;  // DTLAUNCH_DDP_HIER on this rank
};

#if DTLAUNCH_DDP_HAVE_GLOO
std::shared_ptr<ProcessGroup> make_gloo_group(const WorkerEnv& env, GroupParts parts);
// Sends `bytes` (a contiguous CPU tensor) to `peer`, or receives them from it, on a Gloo group:
// a live recovery's state transfer. kConfig on another backend's group.
std::shared_ptr<Work> gloo_point_to_point(ProcessGroup& group, at::Tensor& bytes, int peer,
                                          bool sending);
#endif

// InitOptions::gloo_threads = 0: 2 Gloo threads when this rank has at least 4 CPUs of its own,
// else 1. allowed_cpus: its affinity mask's count; node_cpus: the machine's.
int automatic_gloo_threads(unsigned allowed_cpus, unsigned node_cpus, int local_world_size);

#if DTLAUNCH_DDP_HAVE_NCCL
// Number of usable CUDA devices; 0 when the driver or the devices are missing.
int cuda_device_count() noexcept;

std::shared_ptr<ProcessGroup> make_nccl_group(const WorkerEnv& env, GroupParts parts);
#endif

}  // namespace dtlaunch::ddp::detail
