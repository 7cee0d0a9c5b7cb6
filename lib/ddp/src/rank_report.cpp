#include "rank_report.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "core/text.hpp"
#include "monitor.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

// The watcher's poll interval: a store round trip per rank per interval, so that rank 0's store
// serves at most about 1000 of them a second at any world size.
milliseconds watch_interval(int world_size) {
  return std::clamp<milliseconds>(milliseconds(world_size), milliseconds(200), milliseconds(2000));
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

}  // namespace

std::string position_record(const FlightRecorder& rec, const std::string& host, int local_rank) {
  const CollectiveRecord last = rec.last();
  const char* state = last.seq == 0                                    ? "none"
                      : last.end_us == 0                               ? "in"
                      : last.state == CollectiveRecord::State::kFailed ? "failed"
                                                                       : "done";
  const int64_t since = last.end_us != 0 ? last.end_us : last.enqueue_us;
  const int64_t age_ms = last.seq == 0 ? 0 : (now_us() - since) / 1000;
  return std::to_string(last.seq) + "\n" + state + "\n" + signature_with_count(last) + "\n" + host +
         "\n" + std::to_string(local_rank) + "\n" + std::to_string(age_ms);
}

namespace {

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

}  // namespace

void answer_reports(WorkerEnv env, std::string host, std::shared_ptr<FlightRecorder> recorder,
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
      while (store->check({store_keys::Diag::ask(round)})) {
        store->set(store_keys::Diag::position(round, env.rank),
                   bytes(position_record(*recorder, host, env.local_rank)));
        ++round;
      }
    }
  } catch (const std::exception&) {
    // The store is gone: the job ends, or fails and says so itself.
  }
}

namespace {

// What one report round gathered: each rank's position (none for a rank that published nothing
// within the grace), and where the silent ones were at the start.
struct Positions {
  std::vector<std::optional<Position>> of;
  std::map<int, std::string> silent_where;
};

// Opens a report round, publishes this rank's position `own` in it, and reads the others' as
// they arrive, for up to `grace`.
Positions ask_positions(c10d::Store& store, const WorkerEnv& env, milliseconds grace,
                        const std::string& own) {
  Positions p;
  p.of.resize(static_cast<size_t>(env.world_size));
  store.add(store_keys::Diag::reporting(), 1);
  const int64_t round = store.add(store_keys::Diag::asks(), 1);
  store.set(store_keys::Diag::position(round, env.rank), bytes(own));
  store.set(store_keys::Diag::ask(round), bytes(std::to_string(env.rank)));
  const auto deadline = Clock::now() + grace;
  for (;;) {
    bool all = true;
    for (int r = 0; r < env.world_size; ++r) {
      if (p.of[r]) continue;
      if (store.check({store_keys::Diag::position(round, r)}))
        p.of[r] = parse_position(text(store.get(store_keys::Diag::position(round, r))));
      if (!p.of[r]) all = false;
    }
    if (all || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  // Where the silent ones were at the start, from their check-in records.
  for (int r = 0; r < env.world_size && p.silent_where.size() < 8; ++r) {
    if (p.of[r]) continue;
    std::istringstream rec(text(store.get(store_keys::Diag::checkin(r))));
    std::string host, local;
    std::getline(rec, host);
    std::getline(rec, local);
    p.silent_where[r] = host + ", local rank " + local;
  }
  store.add(store_keys::Diag::reporting(), -1);
  return p;
}

// "ranks 0,2 wait in #5; rank 1 (node2, local rank 1) last entered #4 ...": the ranks that
// answered grouped by where they are, the group of this rank (in collective `seq`) first.
std::vector<std::string> where_groups_are(const Positions& p, uint64_t seq) {
  std::map<std::tuple<int, uint64_t, std::string, std::string>, std::vector<int>> groups;
  for (int r = 0; r < static_cast<int>(p.of.size()); ++r) {
    if (!p.of[r]) continue;
    const bool with_me = p.of[r]->state == "in" && p.of[r]->seq == seq;
    groups[{with_me ? 0 : 1, p.of[r]->seq, p.of[r]->state, p.of[r]->signature}].push_back(r);
  }
  std::vector<std::string> parts;
  for (const auto& [key, ranks] : groups) {
    const auto& [order, their_seq, state, sig] = key;
    const Position& first = *p.of[ranks.front()];
    const std::string s = "#" + std::to_string(their_seq);
    const char* wait = ranks.size() == 1 ? " waits in " : " wait in ";
    if (order == 0)
      parts.push_back((ranks.size() == 1 ? "rank " : "ranks ") + format_ranks(ranks) + wait + s);
    else if (state == "none")
      parts.push_back(name_ranks(ranks, p.of) + " entered no collective yet");
    else if (state == "in")
      parts.push_back(name_ranks(ranks, p.of) + wait + s + " " + sig + " since " +
                      seconds_text(first.age_ms / 1000.0));
    else
      parts.push_back(name_ranks(ranks, p.of) + " last entered " + s + " " + sig + ", " +
                      (state == "failed" ? "which failed " : "finished ") +
                      seconds_text(first.age_ms / 1000.0) + " ago");
  }
  return parts;
}

// "ranks 3 (node4, local rank 1), 5 published nothing within 10s (...)", or "" when all answered.
std::string silent_ranks(const Positions& p, milliseconds grace) {
  std::vector<int> silent;
  for (int r = 0; r < static_cast<int>(p.of.size()); ++r)
    if (!p.of[r]) silent.push_back(r);
  if (silent.empty()) return "";
  std::string who;
  for (size_t i = 0; i < silent.size() && i < 8; ++i) {
    const int r = silent[i];
    auto it = p.silent_where.find(r);
    who += (i ? ", " : "") + std::to_string(r) +
           (it != p.silent_where.end() ? " (" + it->second + ")" : "");
  }
  if (silent.size() > 8) who += ", ... (" + std::to_string(silent.size()) + " in all)";
  return (silent.size() == 1 ? "rank " : "ranks ") + who + " published nothing within " +
         core::duration_text(grace) + " (dead, or stuck where the runtime cannot answer)";
}

}  // namespace

std::string where_everyone_is(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store,
                              milliseconds grace, const std::string& own, uint64_t seq) {
  struct Result {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::string error;
    Positions positions;
  };
  auto result = std::make_shared<Result>();
  // On a thread of its own, so that a store that stopped answering cannot hold this rank past
  // the grace: the thread is left behind then.
  std::thread([result, env, grace, own, store] {
    Positions got;
    std::string error;
    try {
      got = ask_positions(*store, env, grace, own);
    } catch (const std::exception& e) {
      error = first_line(e);
    }
    std::lock_guard<std::mutex> lock(result->mutex);
    result->positions = std::move(got);
    result->error = error;
    result->done = true;
    result->done_cv.notify_all();
  }).detach();

  std::unique_lock<std::mutex> lock(result->mutex);
  const bool finished =
      result->done_cv.wait_for(lock, grace + std::chrono::seconds(2), [&] { return result->done; });
  if (!finished || !result->error.empty()) {
    lock.unlock();
    // A store connection that failed at once (reset, closed): rank 0 may be dying, and its
    // listening socket may still take a connection for a moment. Seen under load with 3 ranks
    // and rank 0 killed (3 of 9 runs of ddp_proc_test's case, 0 of 6 with the probes): the
    // report's connection was reset, and the probe's connect right after it succeeded.
    const int probes = finished ? 3 : 1;
    for (int i = 0; i < probes; ++i) {
      if (i > 0) std::this_thread::sleep_for(milliseconds(100));
      if (std::string gone = store_host_gone(env, std::chrono::seconds(2)); !gone.empty())
        return gone;
    }
    return "no report: the store at " + env.master_addr + ":" + std::to_string(env.master_port) +
           " did not answer (" +
           (finished ? result->error : "no reply within " + core::duration_text(grace)) + ")";
  }
  std::vector<std::string> parts = where_groups_are(result->positions, seq);
  if (std::string silent = silent_ranks(result->positions, grace); !silent.empty())
    parts.push_back(silent);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

void wait_for_reporters(c10d::Store& store, Clock::time_point until) {
  try {
    while (store.add(store_keys::Diag::reporting(), 0) > 0 && Clock::now() < until)
      std::this_thread::sleep_for(milliseconds(20));
  } catch (const std::exception&) {
  }
}

milliseconds default_grace(int world_size) {
  return 2 * watch_interval(world_size) + milliseconds(500);
}

}  // namespace dtlaunch::ddp::detail
