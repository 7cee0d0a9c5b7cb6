// The heartbeat's cost and detection time at scale: WORLD ranks simulated in one process on the
// real core (ring.cpp), a network of fixed latency, one fault per run. Prints one line per fault:
// messages per rank per second, the busiest rank's received messages per second, and when the
// first and the last survivor learnt of the loss.
//   dtlaunch_heartbeat_bench [WORLD [TIMEOUT_MS [INTERVAL_MS [LATENCY_US]]]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "heartbeat/simulation.hpp"

using namespace dtlaunch::heartbeat;
using std::chrono::milliseconds;

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int timeout_ms = argc > 2 ? std::atoi(argv[2]) : 10000;
  const int interval_ms = argc > 3 ? std::atoi(argv[3]) : 1000;
  const int latency_us = argc > 4 ? std::atoi(argv[4]) : 100;
  if (world < 2 || timeout_ms <= 0 || interval_ms <= 0 || latency_us <= 0) {
    std::fprintf(stderr, "usage: %s [WORLD>=2 [TIMEOUT_MS [INTERVAL_MS [LATENCY_US]]]]\n", argv[0]);
    return 2;
  }
  std::printf("%d ranks, timeout %d ms, interval %d ms, one-way latency %d us\n", world, timeout_ms,
              interval_ms, latency_us);
  std::printf("%-26s %12s %14s %12s %12s %12s %10s\n", "fault", "msgs/rank/s", "busiest rx/s",
              "first (ms)", "last (ms)", "all (ms)", "sim (s)");
  struct Run {
    const char* name;
    std::vector<SimulationSetup::Injection> faults;
  };
  const milliseconds at(20000);
  const int mid = world / 2;
  const std::vector<Run> runs = {
      {"none", {}},
      {"exit (rank W/2)", {{mid, Fault::kExit, at}}},
      {"freeze (rank W/2)", {{mid, Fault::kFreeze, at}}},
      {"partition (rank W/2)", {{mid, Fault::kPartition, at}}},
      {"rank 0 exits", {{0, Fault::kExit, at}}},
      {"two neighbours freeze", {{mid, Fault::kFreeze, at}, {mid + 1, Fault::kFreeze, at}}},
  };
  for (const Run& run : runs) {
    SimulationSetup setup;
    setup.world = world;
    setup.settings.timeout = milliseconds(timeout_ms);
    setup.settings.interval = milliseconds(interval_ms);
    setup.latency = std::chrono::microseconds(latency_us);
    setup.faults = run.faults;
    setup.duration =
        at + milliseconds(timeout_ms) + milliseconds(world * 2 * latency_us / 1000 + 5000);
    const auto start = std::chrono::steady_clock::now();
    const SimulationResult r = simulate(setup);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double seconds = std::chrono::duration<double>(setup.duration).count();
    int64_t first = -1, last = -1, all = -1;  // all: when the last survivor knew every loss
    int never = 0;
    for (int rank = 0; rank < world; ++rank) {
      bool faulty = false;
      for (const auto& f : run.faults) faulty = faulty || f.rank == rank;
      if (faulty) continue;
      const int64_t t = r.first_verdict_ms[static_cast<size_t>(rank)];
      if (t < 0) {
        ++never;
        continue;
      }
      first = first < 0 ? t : std::min(first, t);
      last = std::max(last, t);
      if (r.verdicts[static_cast<size_t>(rank)].size() >= run.faults.size())
        all = std::max(all, r.all_verdicts_ms[static_cast<size_t>(rank)]);
    }
    std::printf("%-26s %12.2f %14.2f %12lld %12lld %12lld %10.2f", run.name,
                static_cast<double>(r.messages) / world / seconds,
                static_cast<double>(r.max_received_by_one) / seconds, static_cast<long long>(first),
                static_cast<long long>(last), static_cast<long long>(all), wall);
    if (!run.faults.empty() && never > 0) std::printf("  (%d survivors never learnt)", never);
    std::printf("\n");
  }
  return 0;
}
