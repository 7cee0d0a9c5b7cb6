// The cross-rank report of a failed collective ("where is everyone"), through the rendezvous
// store under dtlaunch/diag/: a rank whose collective failed bumps dtlaunch/diag/asks to a new
// round N, publishes its own position under pos/N/<rank> and sets ask/N; every rank's watcher
// thread, polling ask/<its next round>, publishes its position under pos/N/<rank>. The failed
// rank waits a bounded grace for the positions, then names who is where and who said nothing.
// Not installed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "internal.hpp"
#include "recorder.hpp"

namespace dtlaunch::ddp::detail {

// Tells a watcher thread to stop; shared with it, since it may outlive the group.
struct WatcherState {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
};

// The watcher thread: answers report rounds until told to stop or the store goes away, on a
// store connection of its own (a c10d::Store client is not for two threads at once).
void answer_reports(WorkerEnv env, std::string host, std::shared_ptr<FlightRecorder> recorder,
                    std::shared_ptr<WatcherState> state);

// This rank's position as published: "seq\nstate\nsignature\nhost\nlocal_rank\nage_ms".
std::string position_record(const FlightRecorder& rec, const std::string& host, int local_rank);

// Asks every rank where it is (this rank being in collective `seq`, at `own`, its
// position_record) and waits up to `grace` for the answers: "ranks 0,2 wait in #5; rank 1 (node2,
// local rank 1) last entered #4 ...", or why there is no report.
std::string where_everyone_is(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store,
                              milliseconds grace, const std::string& own, uint64_t seq);

// Rank 0, which hosts the store, waits until the ranks reporting now are done, or `until`.
void wait_for_reporters(c10d::Store& store, Clock::time_point until);

// Two of the watchers' poll intervals and a margin: every live rank has answered by then.
milliseconds default_grace(int world_size);

}  // namespace dtlaunch::ddp::detail
