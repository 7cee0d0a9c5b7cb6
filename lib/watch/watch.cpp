#include "watch/watch.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <mutex>

#include "core/error.hpp"
#include "core/hmac.hpp"
#include "core/host.hpp"
#include "heartbeat/node.hpp"
#include "heartbeat/ring.hpp"
#include "proc/fd.hpp"
#include "proc/watch.hpp"

namespace dtlaunch::watch {

std::vector<std::uint32_t> ring_successors(std::uint32_t rank, std::uint32_t world) {
  std::vector<std::uint32_t> successors;
  if (world < 2) return successors;
  const auto window = static_cast<std::uint32_t>(heartbeat::kEndpointWindow);
  for (std::uint32_t i = 1; i <= std::min(window, world - 1); ++i)
    successors.push_back((rank + i) % world);
  return successors;
}

WatchJoin::WatchJoin(const std::string& master_addr, std::uint32_t rank, std::uint32_t world)
    : host_(core::short_host_name("?")), rank_(rank), world_(world) {
  // The address the other tasks reach this one on: the heartbeat listens there only.
  std::string address = heartbeat::local_address_towards(master_addr);
  try {
    listener_ = std::make_unique<heartbeat::Listener>(address);
  } catch (const std::exception& e) {
    throw core::Error(core::ExitCode::kFailure,
                      std::string("--watch: cannot open the heartbeat endpoint: ") + e.what());
  }
  if (address.empty()) address = host_;
  endpoint_ = heartbeat::format_endpoint({address, listener_->port(), host_});
}

WatchJoin::~WatchJoin() = default;

int WatchJoin::run(const proc::WorkerProcess& program, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds grace, std::uint64_t tag,
                   std::optional<core::JobKey> key) {
  // The preflight's probes and buffers are freed; hand their pages back, so that dtlaunch stays
  // small for the whole run (docs/benchmarks.md: under 5 MB).
  ::malloc_trim(0);
  proc::Pipe lost = proc::make_pipe();
  std::mutex mutex;
  std::string first_loss;
  std::unique_ptr<heartbeat::Node> node;
  if (world_ > 1) {
    heartbeat::NodeOptions o;
    o.self = static_cast<int>(rank_);
    o.world = static_cast<int>(world_);
    o.settings.timeout = timeout;
    o.settings.interval = std::min(std::chrono::milliseconds(1000), timeout / 5);
    o.tag = tag;
    o.key = key;
    for (const auto& [r, text] : ring_) {
      try {
        o.endpoints[static_cast<int>(r)] = heartbeat::parse_endpoint(text);
      } catch (const std::invalid_argument& e) {
        throw core::Error(core::ExitCode::kFailure, "--watch: rank " + std::to_string(r) +
                                                        "'s heartbeat endpoint: " + e.what());
      }
    }
    const int lost_write = lost.write.get();
    o.on_verdict = [&, lost_write](const heartbeat::Verdict& v) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first_loss.empty()) return;
      std::string who;
      if (v.rank == static_cast<int>(rank_)) {
        // "rank N (HOST)", as the runtime says it: dtlaunch job reads the host from it.
        who = "this task, rank " + std::to_string(v.rank) + " (" + host_ +
              "), was declared lost by rank " + std::to_string(v.seen_by) + ": " +
              heartbeat::describe_how(v);
      } else {
        std::string host = "host unknown here";
        const auto it = ring_.find(static_cast<std::uint32_t>(v.rank));
        if (it != ring_.end()) host = heartbeat::parse_endpoint(it->second).host;
        who = "rank " + std::to_string(v.rank) + " (" + host + ") " + heartbeat::describe_how(v) +
              ", seen by rank " + std::to_string(v.seen_by);
      }
      first_loss = "dtlaunch --watch: rank " + std::to_string(rank_) + " (" + host_ +
                   "): a peer was lost: " + who + "; stopping the program, exit 76";
      // Sealed: `dtlaunch job` believes this line, not the program's look-alikes.
      if (key) first_loss = core::seal_line(*key, first_loss);
      [[maybe_unused]] const ssize_t n = ::write(lost_write, "!", 1);
    };
    node = std::make_unique<heartbeat::Node>(std::move(o), std::move(*listener_));
  }
  proc::WatchOptions w;
  w.grace = grace;
  w.lost_fd = lost.read.get();
  w.loss_line = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    return first_loss;
  };
  // Goodbye: an orderly end here, whatever the program's status.
  w.before_return = [&] {
    if (!node) return;
    node->stop(true);
    if (const std::string refused = node->refused().summary(); !refused.empty())
      std::cerr << "dtlaunch --watch: rank " << rank_ << ": the heartbeat " << refused
                << " from outside the job (docs/security.md)\n";
  };
  return proc::watch_program(program, w, std::cerr);
}

}  // namespace dtlaunch::watch
