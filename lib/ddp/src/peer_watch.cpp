#include "peer_watch.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <thread>

#include "contract/contract.hpp"
#include "core/hmac.hpp"
#include "core/host.hpp"
#include "core/text.hpp"
#include "heartbeat/node.hpp"
#include "internal.hpp"
#include "monitor.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

// How long after the first verdict the error waits for others (the rest of a node's ranks).
constexpr std::chrono::milliseconds kGatherVerdicts{300};
// How long start-up may stay blocked after a verdict before the process ends itself. Where the
// connections' shutdown works, the blocked call returns within milliseconds, and the error
// after kGatherVerdicts.
constexpr std::chrono::milliseconds kStartupGrace{3000};

uint64_t job_tag(const WorkerEnv& env) {
  return std::hash<std::string>{}(env.run_id + "/" + env.master_addr + ":" +
                                  std::to_string(env.master_port) + "/" +
                                  std::to_string(env.world_size));
}

}  // namespace

void attach_peer_watch(ProcessGroup& group, std::shared_ptr<PeerWatch> watch) {
  group.peer_watch_ = std::move(watch);
}

std::shared_ptr<PeerWatch> PeerWatch::prepare(const WorkerEnv& env,
                                              std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0 || env.world_size < 2) return nullptr;
  return std::shared_ptr<PeerWatch>(new PeerWatch(env, timeout));
}

PeerWatch::PeerWatch(const WorkerEnv& env, std::chrono::milliseconds timeout)
    : env_(env), timeout_(timeout), host_(core::short_host_name("?")) {
  sockets_before_ = core::open_sockets();
  // The address the other ranks reach this one on: the heartbeat listens there only.
  address_ = heartbeat::local_address_towards(env_.master_addr);
  try {
    listener_ = std::make_unique<heartbeat::Listener>(address_);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kBackend,
                "dtlaunch ddp: rank " + std::to_string(env.rank) +
                    " cannot open its heartbeat endpoint: " + e.what() +
                    " (DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=0 turns the heartbeat off)");
  }
  listener_fd_ = listener_->fd();
  hosts_.assign(static_cast<size_t>(env.world_size), "");
  hosts_[static_cast<size_t>(env.rank)] = host_;
  // Until its endpoint is read (a rank not yet started may stand before it on the ring): rank 0
  // runs where the store is.
  if (env.rank != 0) hosts_[0] = env.master_addr;
}

PeerWatch::~PeerWatch() {
  say_refused();
  startup_over();
  if (backstop_.joinable()) backstop_.join();
}

void PeerWatch::startup_over() {
  {
    std::lock_guard<std::mutex> lock(startup_mutex_);
    startup_over_ = true;
  }
  startup_done_.notify_all();
}

// Torch's NCCL watchdog ends the process on an error it cannot recover from; this does the
// same, with the verdict and the status a survivor exits with (kExitPeerLost), so that the job
// fails in seconds, not after the backend's timeout. _Exit: a destructor could wait on the
// blocked thread.
void PeerWatch::exit_if_startup_stays_blocked() {
  {
    std::unique_lock<std::mutex> lock(startup_mutex_);
    if (startup_done_.wait_for(lock, kStartupGrace, [this] { return startup_over_; })) return;
  }
  const std::string message = std::string(error().what()) +
                              "; start-up was still blocked in the backend " +
                              core::duration_text(kStartupGrace) +
                              " after the verdict: exiting with " + std::to_string(kExitPeerLost);
  say(message);
  std::_Exit(kExitPeerLost);
}

void PeerWatch::join(c10d::Store& store) {
  heartbeat::NodeOptions o;
  o.self = env_.rank;
  o.world = env_.world_size;
  o.settings.timeout = timeout_;
  o.settings.interval = std::min(std::chrono::milliseconds(1000), timeout_ / 5);
  // This rank's thread runs before its endpoint is published: its watcher's first hello is
  // answered at once, so one timeout of silence is a loss from the start.
  o.settings.startup_timeouts = 1;
  o.tag = job_tag(env_);
  if (!env_.job_key.empty())  // checked by WorkerEnv
    o.key = core::parse_job_key(env_.job_key, contract::env_var::kJobKey);
  o.position = [this] {
    const Monitor* m = monitor_for_position_.load(std::memory_order_acquire);
    if (m == nullptr) return heartbeat::Position{};
    const CollectiveRecord r = m->recorder().last();
    return heartbeat::Position{r.seq, static_cast<uint8_t>(static_cast<uint8_t>(r.op) + 1)};
  };
  o.on_verdict = [this](const heartbeat::Verdict& v) { on_verdict(v); };
  const uint16_t port = listener_->port();
  try {
    std::lock_guard<std::mutex> lock(node_mutex_);
    node_ = std::make_unique<heartbeat::Node>(std::move(o), std::move(*listener_));
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kBackend, "dtlaunch ddp: rank " + std::to_string(env_.rank) +
                                         " cannot start its heartbeat: " + e.what());
  }
  const std::string address = address_.empty() ? host_ : address_;
  const std::string record = heartbeat::format_endpoint({address, port, host_});
  store.set(store_keys::Heartbeat::endpoint(env_.rank),
            std::vector<uint8_t>(record.begin(), record.end()));
}

// What the heartbeat refused (docs/security.md), once, as the rank ends: frames or connections
// from outside the job are worth a line, never an action.
void PeerWatch::say_refused() {
  std::lock_guard<std::mutex> lock(node_mutex_);
  if (!node_) return;
  const heartbeat::Refused r = node_->refused();
  if (r.total() == 0) return;
  say("dtlaunch ddp: rank " + std::to_string(env_.rank) + ": the heartbeat " + r.summary() +
      " from outside the job (" + (env_.job_key.empty() ? "no DTLAUNCH_JOB_KEY" : "job key") +
      ", docs/security.md)");
}

void PeerWatch::fetch_endpoints(c10d::Store& store, bool all_published) {
  if (!node_) return;
  const int ahead = std::min(heartbeat::kEndpointWindow, env_.world_size - 1);
  std::map<int, heartbeat::Endpoint> found;
  for (; fetched_ahead_ < ahead; ++fetched_ahead_) {
    const int r = (env_.rank + fetched_ahead_ + 1) % env_.world_size;
    // The ring's order: a rank further ahead is watched only once the nearer ones are lost, and
    // they are watched only once known, so one request per poll is enough.
    if (!all_published && !store.check({store_keys::Heartbeat::endpoint(r)})) break;
    const auto bytes = store.get(store_keys::Heartbeat::endpoint(r));
    try {
      found[r] = heartbeat::parse_endpoint(std::string(bytes.begin(), bytes.end()));
    } catch (const std::invalid_argument& e) {
      throw Error(ErrorKind::kBackend, std::string("dtlaunch ddp: rank ") + std::to_string(r) +
                                           "'s heartbeat endpoint: " + e.what());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    hosts_[static_cast<size_t>(r)] = found[r].host;
  }
  if (!found.empty()) node_->add_endpoints(found);
}

void PeerWatch::start(std::shared_ptr<Monitor> monitor) {
  monitor_ = std::move(monitor);
  monitor_for_position_.store(monitor_.get(), std::memory_order_release);
  // The connections the runtime opened since prepare(): the store's and the backend's. A
  // program's own sockets opened later are not the runtime's to shut down.
  std::lock_guard<std::mutex> lock(node_mutex_);
  runtime_sockets_ = sockets_since_prepare();
}

void PeerWatch::on_verdict(const heartbeat::Verdict& v) {
  std::string who = "rank " + std::to_string(v.rank);
  std::string host;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    host = hosts_[static_cast<size_t>(v.rank)];
  }
  if (v.rank == env_.rank) {
    // The others declared this rank lost: it is cut off from them, or was stopped.
    who = "this rank " + std::to_string(v.rank) + " (" + host_ + ") was declared lost by rank " +
          std::to_string(v.seen_by) + ": " + heartbeat::describe_how(v);
  } else {
    who += " (" + (host.empty() ? std::string("host unknown here") : host) + ")";
    if (v.rank == 0 && !env_.store_hosted) who += ", which hosted the store,";
    who += " " + heartbeat::describe_how(v) + ", seen by rank " + std::to_string(v.seen_by);
    if (v.last.seq == 0 || v.last.op == 0)
      who += monitor_for_position_.load() ? ", before any collective" : ", during start-up";
    else
      who += ", last in " + std::string(op_name(static_cast<Op>(v.last.op - 1))) + " #" +
             std::to_string(v.last.seq);
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first = lines_.empty();
    lines_.push_back(who);
    lost_ranks_.push_back(v.rank);
  }
  if (!first) return;
  first_verdict_at_.store(std::chrono::steady_clock::now());
  abort_flag_->store(true, std::memory_order_release);
  abort_connections();
  lost_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(startup_mutex_);
    if (!startup_over_) backstop_ = std::thread([this] { exit_if_startup_stays_blocked(); });
  }
  // The one line `dtlaunch job` believes (only a survivor's first verdict), sealed with the
  // job's key so that the program's own output cannot pass for it (docs/security.md).
  const std::string line =
      "dtlaunch ddp: rank " + std::to_string(env_.rank) + " (" + host_ + "): peer lost: " + who;
  say(env_.job_key.empty()
          ? line
          : core::seal_line(core::parse_job_key(env_.job_key, contract::env_var::kJobKey), line));
  if (Monitor* m = monitor_for_position_.load()) m->write_file("peer lost: " + who);
}

// The sockets opened since prepare(): the runtime's, and the heartbeat's own.
std::set<core::OpenSocket> PeerWatch::sockets_since_prepare() const {
  std::set<core::OpenSocket> out;
  for (const auto& s : core::open_sockets())
    if (!sockets_before_.count(s) && s.fd != listener_fd_) out.insert(s);
  return out;
}

void PeerWatch::abort_connections() {
  // As ncclCommAbort does for NCCL: every connection of the group fails now, so that a
  // collective blocked on the lost rank returns, and the backend's threads can be joined.
  // Listening sockets stay: the store's server thread ends the process on an error of its own.
  // During start-up, the connections are those open now: the store's, the backend's so far.
  // The heartbeat's own stay, to pass the verdict on (this runs on its thread: they are current).
  std::lock_guard<std::mutex> lock(node_mutex_);
  const std::vector<int> own = node_ ? node_->own_sockets() : std::vector<int>{};
  const auto now = core::open_sockets();
  for (const auto& s : runtime_sockets_ ? *runtime_sockets_ : sockets_since_prepare()) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (!now.count(s) || std::find(own.begin(), own.end(), s.fd) != own.end() ||
        (::getsockopt(s.fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening))
      continue;
    ::shutdown(s.fd, SHUT_RDWR);
  }
}

Error PeerWatch::error() const {
  // A node lost takes all its ranks at once, and their verdicts come within milliseconds of
  // each other: wait that long after the first, so that the error names them all.
  std::this_thread::sleep_until(first_verdict_at_.load() + kGatherVerdicts);
  std::lock_guard<std::mutex> lock(mutex_);
  std::string msg = "dtlaunch ddp: rank " + std::to_string(env_.rank) + " (" + host_ +
                    "): peer lost (heartbeat, timeout " + core::duration_text(timeout_) + "): ";
  for (size_t i = 0; i < lines_.size(); ++i) msg += (i ? "; " : "") + lines_[i];
  return Error(ErrorKind::kPeerLost, msg);
}

std::vector<int> PeerWatch::lost_ranks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_ranks_;
}

bool PeerWatch::wait_lost(std::chrono::milliseconds within) const {
  const auto until = std::chrono::steady_clock::now() + within;
  while (!lost()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace dtlaunch::ddp::detail
