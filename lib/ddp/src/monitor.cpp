// The diagnostics of a group: see monitor.hpp. The cross-rank report goes through the rendezvous
// store, under dtlaunch/diag/: a rank whose collective failed bumps dtlaunch/diag/asks to a new
// round N, publishes its own position under pos/N/<rank> and sets ask/N; every rank's watcher
// thread, polling ask/<its next round>, publishes its position under pos/N/<rank>. The failed
// rank waits a bounded grace for the positions, then names who is where and who said nothing.
#include "monitor.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/text.hpp"
#include "internal.hpp"

namespace dtlaunch::ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::string kAsksKey = "dtlaunch/diag/asks";
// How many ranks are reporting now: rank 0, which hosts the store, stays until they are done.
const std::string kReportingKey = "dtlaunch/diag/reporting";

std::string ask_key(int64_t round) {
  return "dtlaunch/diag/ask/" + std::to_string(round);
}
std::string pos_key(int64_t round, int rank) {
  return "dtlaunch/diag/pos/" + std::to_string(round) + "/" + std::to_string(rank);
}

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

std::string dtype_name(int8_t dtype) {
  if (dtype < 0) return "";
  switch (static_cast<at::ScalarType>(dtype)) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(static_cast<at::ScalarType>(dtype));
  }
}

namespace {

// "all_reduce (float32, 256 elements)", "broadcast (float32, 10 elements, root 0)", "barrier".
std::string signature_text(const CollectiveRecord& r) {
  std::string out = op_name(r.op);
  if (r.dtype < 0) return out;
  out += " (" + dtype_name(r.dtype) + ", " + std::to_string(r.numel) +
         (r.numel == 1 ? " element" : " elements");
  if (r.root >= 0) out += ", root " + std::to_string(r.root);
  return out + ")";
}

std::string seconds_2(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// A rank's position, as published: "seq\nstate\nsignature\nhost\nlocal_rank\nage_ms".
struct Position {
  uint64_t seq = 0;
  std::string state;  // "in", "done", "failed", "none"
  std::string signature;
  std::string host;
  int local_rank = -1;
  int64_t age_ms = 0;  // since it entered (in) or left (done, failed) that collective
};

std::string position_record(const FlightRecorder& rec, const std::string& host, int local_rank) {
  const CollectiveRecord last = rec.last();
  const char* state = last.seq == 0                                    ? "none"
                      : last.end_us == 0                               ? "in"
                      : last.state == CollectiveRecord::State::kFailed ? "failed"
                                                                       : "done";
  const int64_t since = last.end_us != 0 ? last.end_us : last.start_us;
  const int64_t age_ms = last.seq == 0 ? 0 : (now_us() - since) / 1000;
  return std::to_string(last.seq) + "\n" + state + "\n" + signature_text(last) + "\n" + host +
         "\n" + std::to_string(local_rank) + "\n" + std::to_string(age_ms);
}

std::optional<Position> parse_position(const std::string& rec) {
  std::vector<std::string> f;
  std::istringstream in(rec);
  for (std::string line; std::getline(in, line);) f.push_back(line);
  if (f.size() != 6) return std::nullopt;
  try {
    return Position{std::stoull(f[0]), f[1], f[2], f[3], std::stoi(f[4]), std::stoll(f[5])};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string where(int rank, const std::string& host, int local_rank) {
  return "rank " + std::to_string(rank) + " (" + host + ", local rank " +
         std::to_string(local_rank) + ")";
}

// "rank 1 (node2, local rank 1)" for a few; the first few and a count for many.
std::string name_ranks(const std::vector<int>& ranks,
                       const std::vector<std::optional<Position>>& pos) {
  if (ranks.size() == 1) return where(ranks[0], pos[ranks[0]]->host, pos[ranks[0]]->local_rank);
  std::string out = "ranks " + format_ranks(ranks) + " (";
  for (size_t i = 0; i < ranks.size() && i < 3; ++i)
    out += (i ? ", " : "") + pos[ranks[i]]->host + " local rank " +
           std::to_string(pos[ranks[i]]->local_rank);
  return out + (ranks.size() > 3 ? ", ...)" : ")");
}

const char* state_name(CollectiveRecord::State s) {
  switch (s) {
    case CollectiveRecord::State::kStarted:
      return "started";
    case CollectiveRecord::State::kCompleted:
      return "completed";
    case CollectiveRecord::State::kFailed:
      return "failed";
  }
  return "started";
}

std::optional<uint64_t> env_number(const char* name, uint64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*v == '-' || *end != '\0' || errno != 0 || n > max)
    throw Error(ErrorKind::kConfig, std::string("dtlaunch ddp: ") + name + "='" + v +
                                        "' is not an integer in 0.." + std::to_string(max));
  return n;
}

bool env_flag(const char* name) {
  const auto n = env_number(name, 1);
  return n && *n == 1;
}

// The watcher's poll interval: a store round trip per rank per interval, so that rank 0's store
// serves at most about 1000 of them a second at any world size.
milliseconds watch_interval(int world_size) {
  return std::clamp<milliseconds>(milliseconds(world_size), milliseconds(200), milliseconds(2000));
}

}  // namespace

struct WatcherState {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
};

namespace {

// Answers report rounds until told to stop or the store goes away, on a connection of its own
// (a c10d::Store client is not for two threads at once).
void watch(WorkerEnv env, std::string host, std::shared_ptr<FlightRecorder> recorder,
           std::shared_ptr<WatcherState> state) {
  try {
    // LibTorch 2.x built without libuv (Debian's) refuses a client that asks for it too.
    auto store = connect_store(env, std::chrono::seconds(30));
    const milliseconds every = watch_interval(env.world_size);
    for (int64_t round = 1;;) {
      {
        std::unique_lock<std::mutex> lock(state->mutex);
        state->wake.wait_for(lock, every, [&] { return state->stop; });
        if (state->stop) return;
      }
      while (store->check({ask_key(round)})) {
        store->set(pos_key(round, env.rank),
                   bytes(position_record(*recorder, host, env.local_rank)));
        ++round;
      }
    }
  } catch (const std::exception&) {
    // The store is gone: the job ends, or fails and says so itself.
  }
}

}  // namespace

const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kAllGather:
      return "all_gather";
    case Op::kBarrier:
      return "barrier";
  }
  return "collective";
}

std::string describe(const CollectiveRecord& r) {
  std::string sig = signature_text(r);
  const auto space = sig.find(' ');
  if (space == std::string::npos) return sig + " #" + std::to_string(r.seq);
  return sig.substr(0, space) + " #" + std::to_string(r.seq) + sig.substr(space);
}

// Two of the watchers' intervals and a margin: every live rank has answered by then.
milliseconds default_grace(int world_size) {
  return 2 * watch_interval(world_size) + milliseconds(500);
}

MonitorSettings MonitorSettings::from_environment(int world_size) {
  MonitorSettings s;
  if (auto n = env_number("DTLAUNCH_DDP_TRACE_ENTRIES", 10'000'000)) s.trace_entries = *n;
  if (const char* d = std::getenv("DTLAUNCH_DDP_TRACE_DIR")) s.trace_dir = d;
  s.trace_at_exit = env_flag("DTLAUNCH_DDP_TRACE_AT_EXIT");
  s.check = env_flag("DTLAUNCH_DDP_CHECK");
  s.timeline = env_flag("DTLAUNCH_DDP_TIMELINE");
  s.grace = default_grace(world_size);
  if (auto g = env_number("DTLAUNCH_DDP_REPORT_GRACE_MS", 3'600'000)) s.grace = milliseconds(*g);
  if (auto t = env_number("DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", 86'400))
    s.heartbeat_timeout = std::chrono::seconds(*t);
  return s;
}

// ---------------------------------------------------------------------------------------------
// The ring.

uint64_t FlightRecorder::begin(Op op, const at::Tensor* tensor, int root) {
  CollectiveRecord r;
  r.seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  r.op = op;
  if (tensor != nullptr) {
    r.dtype = static_cast<int8_t>(tensor->scalar_type());
    r.numel = tensor->numel();
  }
  r.root = root;
  r.start_us = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ring_.empty()) ring_[r.seq % ring_.size()] = r;
  if (r.seq > last_.seq) last_ = r;
  return r.seq;
}

void FlightRecorder::end(uint64_t seq, bool ok) {
  const int64_t t = now_us();
  const auto state = ok ? CollectiveRecord::State::kCompleted : CollectiveRecord::State::kFailed;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ring_.empty()) {
    CollectiveRecord& r = ring_[seq % ring_.size()];
    if (r.seq == seq) {
      r.end_us = t;
      r.state = state;
    }
  }
  if (last_.seq == seq) {
    last_.end_us = t;
    last_.state = state;
  }
}

CollectiveRecord FlightRecorder::find(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (last_.seq == seq) return last_;
  if (!ring_.empty() && ring_[seq % ring_.size()].seq == seq) return ring_[seq % ring_.size()];
  CollectiveRecord r;
  r.seq = seq;
  return r;
}

CollectiveRecord FlightRecorder::last() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_;
}

std::vector<CollectiveRecord> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> out;
  for (const auto& r : ring_)
    if (r.seq != 0) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

// ---------------------------------------------------------------------------------------------

std::string checkin_key(int rank) {
  return "dtlaunch/diag/checkin/" + std::to_string(rank);
}

std::string checkin_record(const WorkerEnv& env) {
  return hostname() + "\n" + std::to_string(env.local_rank) + "\n" +
         std::to_string(now_us() / 1000);
}

Monitor::Monitor(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store, milliseconds timeout,
                 MonitorSettings settings)
    : env_(env),
      store_(std::move(store)),
      timeout_(timeout),
      settings_(std::move(settings)),
      host_(hostname()),
      recorder_(std::make_shared<FlightRecorder>(settings_.trace_entries)),
      watcher_(std::make_shared<WatcherState>()) {}

Monitor::~Monitor() {
  {
    std::lock_guard<std::mutex> lock(watcher_->mutex);
    watcher_->stop = true;
  }
  watcher_->wake.notify_all();
  // An error's file says more than the exit's would: it is kept.
  if (settings_.trace_at_exit && !error_written_) write_file("exit");
}

void Monitor::start_watcher() {
  if (!store_ || env_.world_size < 2) return;
  // Detached: it may be inside a store call when the group goes, and must not hold it up.
  std::thread(watch, env_, host_, recorder_, watcher_).detach();
}

std::string Monitor::write_file(const std::string& reason) const {
  if (settings_.trace_dir.empty()) return "";
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(settings_.trace_dir, ec);
  const fs::path path =
      fs::path(settings_.trace_dir) / ("rank-" + std::to_string(env_.rank) + ".json");
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) return "";
    out << "{\"rank\": " << env_.rank << ", \"world_size\": " << env_.world_size
        << ", \"local_rank\": " << env_.local_rank << ", \"host\": " << json_quote(host_)
        << ", \"collectives_started\": " << recorder_->started()
        << ", \"reason\": " << json_quote(reason) << ",\n \"entries\": [";
    bool first = true;
    for (const auto& r : recorder_->entries()) {
      out << (first ? "\n" : ",\n") << "  {\"seq\": " << r.seq << ", \"op\": \"" << op_name(r.op)
          << "\", \"dtype\": \"" << dtype_name(r.dtype) << "\", \"numel\": " << r.numel
          << ", \"root\": " << r.root << ", \"start_us\": " << r.start_us
          << ", \"end_us\": " << r.end_us << ", \"state\": \"" << state_name(r.state) << "\"}";
      first = false;
    }
    out << "\n ]}\n";
    if (!out.flush()) return "";
  }
  fs::rename(tmp, path, ec);
  return ec ? "" : path.string();
}

const Error& Monitor::record(const Error& e) {
  write_file(e.what());
  error_written_ = true;
  return e;
}

Error Monitor::failure(uint64_t seq, const Error& cause) {
  const CollectiveRecord mine = recorder_->find(seq);
  std::string msg = "dtlaunch ddp: " + describe(mine);
  if (cause.kind() == ErrorKind::kTimeout) {
    msg += " timed out after " + seconds_text(timeout_) + " on rank " + std::to_string(env_.rank);
  } else if (cause.kind() == ErrorKind::kPeerLost) {
    const std::string what = cause.what();
    const auto at = what.find(" failed: ");
    msg += " lost a peer on rank " + std::to_string(env_.rank) + " (" +
           (at == std::string::npos ? what : what.substr(at + 9)) + ")";
  } else {
    record(cause);
    return cause;
  }
  msg += ": " + report(seq, mine);
  Error e(cause.kind(), msg);
  record(e);
  if (env_.rank == 0 && store_) {
    // The others' reports need the store that leaves with this process.
    const auto until = Clock::now() + settings_.grace + std::chrono::seconds(2);
    try {
      while (store_->add(kReportingKey, 0) > 0 && Clock::now() < until)
        std::this_thread::sleep_for(milliseconds(20));
    } catch (const std::exception&) {
    }
  }
  return e;
}

std::string Monitor::report(uint64_t seq, const CollectiveRecord& mine) {
  if (!store_ || env_.world_size < 2) return "no other rank to ask";
  struct Result {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::string error;
    std::vector<std::optional<Position>> positions;
    std::map<int, std::string> silent_where;
  };
  auto result = std::make_shared<Result>();
  const WorkerEnv env = env_;
  const milliseconds grace = settings_.grace;
  const std::string own = position_record(*recorder_, host_, env_.local_rank);
  // On a thread of its own, so that a store that stopped answering cannot hold this rank past
  // the grace: the thread is left behind then.
  std::thread([result, env, grace, own, store = store_] {
    std::vector<std::optional<Position>> got(static_cast<size_t>(env.world_size));
    std::map<int, std::string> silent_where;
    std::string error;
    try {
      store->add(kReportingKey, 1);
      const int64_t round = store->add(kAsksKey, 1);
      store->set(pos_key(round, env.rank), bytes(own));
      store->set(ask_key(round), bytes(std::to_string(env.rank)));
      const auto deadline = Clock::now() + grace;
      for (;;) {
        bool all = true;
        for (int r = 0; r < env.world_size; ++r) {
          if (got[r]) continue;
          if (store->check({pos_key(round, r)}))
            got[r] = parse_position(text(store->get(pos_key(round, r))));
          if (!got[r]) all = false;
        }
        if (all || Clock::now() >= deadline) break;
        std::this_thread::sleep_for(milliseconds(20));
      }
      // Where the silent ones were at the start, from their check-in records.
      for (int r = 0; r < env.world_size && silent_where.size() < 8; ++r) {
        if (got[r]) continue;
        std::istringstream rec(text(store->get(checkin_key(r))));
        std::string host, local;
        std::getline(rec, host);
        std::getline(rec, local);
        silent_where[r] = host + ", local rank " + local;
      }
      store->add(kReportingKey, -1);
    } catch (const std::exception& e) {
      error = first_line(e);
    }
    std::lock_guard<std::mutex> lock(result->mutex);
    result->positions = std::move(got);
    result->silent_where = std::move(silent_where);
    result->error = error;
    result->done = true;
    result->done_cv.notify_all();
  }).detach();

  std::unique_lock<std::mutex> lock(result->mutex);
  const bool finished =
      result->done_cv.wait_for(lock, grace + std::chrono::seconds(2), [&] { return result->done; });
  if (!finished || !result->error.empty()) {
    lock.unlock();
    const std::string gone = store_host_gone(env_, std::chrono::seconds(2));
    if (!gone.empty()) return gone;
    return "no report: the store at " + env_.master_addr + ":" + std::to_string(env_.master_port) +
           " did not answer (" +
           (finished ? result->error : "no reply within " + seconds_text(grace)) + ")";
  }

  // Group the ranks that answered by where they are; this rank's group first.
  const auto& pos = result->positions;
  std::map<std::tuple<int, uint64_t, std::string, std::string>, std::vector<int>> groups;
  std::vector<int> silent;
  for (int r = 0; r < env_.world_size; ++r) {
    if (!pos[r]) {
      silent.push_back(r);
      continue;
    }
    const bool with_me = pos[r]->state == "in" && pos[r]->seq == seq;
    groups[{with_me ? 0 : 1, pos[r]->seq, pos[r]->state, pos[r]->signature}].push_back(r);
  }
  std::vector<std::string> parts;
  for (const auto& [key, ranks] : groups) {
    const auto& [order, their_seq, state, sig] = key;
    const Position& p = *pos[ranks.front()];
    const std::string s = "#" + std::to_string(their_seq);
    if (order == 0) {
      parts.push_back((ranks.size() == 1 ? "rank " : "ranks ") + format_ranks(ranks) +
                      (ranks.size() == 1 ? " waits in " : " wait in ") + s);
    } else if (state == "none") {
      parts.push_back(name_ranks(ranks, pos) + " entered no collective yet");
    } else if (state == "in") {
      parts.push_back(name_ranks(ranks, pos) + (ranks.size() == 1 ? " waits in " : " wait in ") +
                      s + " " + sig + " since " + seconds_2(p.age_ms / 1000.0) + "");
    } else {
      parts.push_back(name_ranks(ranks, pos) + " last entered " + s + " " + sig + ", " +
                      (state == "failed" ? "which failed " : "finished ") +
                      seconds_2(p.age_ms / 1000.0) + " ago");
    }
  }
  if (!silent.empty()) {
    std::string who;
    for (size_t i = 0; i < silent.size() && i < 8; ++i) {
      const int r = silent[i];
      auto it = result->silent_where.find(r);
      who += (i ? ", " : "") + std::to_string(r) +
             (it != result->silent_where.end() ? " (" + it->second + ")" : "");
    }
    if (silent.size() > 8) who += ", ... (" + std::to_string(silent.size()) + " in all)";
    parts.push_back((silent.size() == 1 ? "rank " : "ranks ") + who + " published nothing within " +
                    seconds_text(settings_.grace) +
                    " (dead, or stuck where the runtime cannot answer)");
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  (void)mine;
  return out;
}

std::string Monitor::startup_line(const StartupPhases& phases) {
  if (env_.rank != 0 || !store_) return "";
  if (!settings_.timeline && phases.rank0_waited <= std::chrono::seconds(1)) return "";
  auto secs = [&](Clock::time_point t) {
    return std::chrono::duration<double>(t - phases.start).count();
  };
  int64_t first = INT64_MAX, last = INT64_MIN;
  int slowest = 0;
  std::string slowest_host = "?";
  try {
    for (int r = 0; r < env_.world_size; ++r) {
      std::istringstream rec(text(store_->get(checkin_key(r))));
      std::string host, local, ms;
      std::getline(rec, host);
      std::getline(rec, local);
      std::getline(rec, ms);
      const int64_t t = std::stoll(ms);
      first = std::min(first, t);
      if (t > last) {
        last = t;
        slowest = r;
        slowest_host = host;
      }
    }
  } catch (const std::exception& e) {
    return "dtlaunch ddp: rendezvous: no timeline (" + first_line(e) + ")";
  }
  return "dtlaunch ddp: rendezvous: " + std::to_string(env_.world_size) + " ranks in " +
         seconds_2(secs(phases.backend_ready)) + "; slowest: rank " + std::to_string(slowest) +
         " (" + slowest_host + ") " + seconds_2((last - first) / 1000.0) +
         " after the first; rank 0: environment read " + seconds_2(secs(phases.env_read)) +
         ", store up " + seconds_2(secs(phases.store_connected)) + ", all checked in " +
         seconds_2(secs(phases.all_checked_in)) + ", backend ready " +
         seconds_2(secs(phases.backend_ready));
}

}  // namespace dtlaunch::ddp::detail
