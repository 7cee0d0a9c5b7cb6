#include "clock_align.hpp"

#include <chrono>
#include <cstdint>
#include <string>

#include "internal.hpp"
#include "recorder.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

// Rank 0's clock against each other rank's, one rank at a time, three exchanges each: rank 0
// says "go", the rank notes t1 and asks, rank 0 answers its own time t0, the rank notes t4. The
// sample with the shortest round trip wins: offset = t0 - (t1 + t4) / 2, error = (t4 - t1) / 2.
constexpr int kClockRounds = 3;

}  // namespace

void align_clock(WorkerEnv env, std::shared_ptr<ClockAlignment> clock) {
  try {
    auto store = connect_store(env, std::chrono::seconds(30));
    if (env.rank == 0) {
      for (int r = 1; r < env.world_size; ++r) {
        for (int k = 0; k < kClockRounds; ++k) {
          store->set(store_keys::Diag::clock("go", r, k), bytes("1"));
          try {
            store->wait({store_keys::Diag::clock("ask", r, k)}, std::chrono::seconds(5));
          } catch (const std::exception&) {
            break;  // that rank is gone or late: the others must not wait for it
          }
          store->set(store_keys::Diag::clock("time", r, k), bytes(std::to_string(now_us())));
        }
      }
      return;
    }
    int64_t best_rtt = INT64_MAX;
    for (int k = 0; k < kClockRounds; ++k) {
      // Rank 0 serves the ranks in turn: ranks far down the list wait their turn.
      store->wait({store_keys::Diag::clock("go", env.rank, k)},
                  std::chrono::seconds(60) + std::chrono::milliseconds(20 * env.world_size));
      const int64_t t1 = now_us();
      store->set(store_keys::Diag::clock("ask", env.rank, k), bytes("1"));
      store->wait({store_keys::Diag::clock("time", env.rank, k)}, std::chrono::seconds(10));
      const int64_t t4 = now_us();
      const int64_t t0 = std::stoll(text(store->get(store_keys::Diag::clock("time", env.rank, k))));
      if (t4 - t1 < best_rtt) {
        best_rtt = t4 - t1;
        clock->offset_us = t0 - (t1 + t4) / 2;
        clock->error_us = (t4 - t1 + 1) / 2;
        clock->known = true;
      }
    }
  } catch (const std::exception&) {
    // Unknown then: the file says so, and `dtlaunch trace` takes the clocks as they are.
  }
}

}  // namespace dtlaunch::ddp::detail
