#include "startup_line.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "internal.hpp"
#include "monitor.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {

std::string startup_line(const WorkerEnv& env, c10d::Store& store, bool timeline,
                         const StartupPhases& phases) {
  if (!timeline && phases.rank0_waited <= std::chrono::seconds(1)) return "";
  auto secs = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t - phases.start).count();
  };
  int64_t first = INT64_MAX, last = INT64_MIN;
  int slowest = 0;
  std::string slowest_host = "?";
  try {
    for (int r = 0; r < env.world_size; ++r) {
      std::istringstream rec(text(store.get(store_keys::Diag::checkin(r))));
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
  return "dtlaunch ddp: rendezvous: " + std::to_string(env.world_size) + " ranks in " +
         seconds_text(secs(phases.backend_ready)) + "; slowest: rank " + std::to_string(slowest) +
         " (" + slowest_host + ") " + seconds_text((last - first) / 1000.0) +
         " after the first; rank 0: environment read " + seconds_text(secs(phases.env_read)) +
         ", store up " + seconds_text(secs(phases.store_connected)) + ", all checked in " +
         seconds_text(secs(phases.all_checked_in)) + ", backend ready " +
         seconds_text(secs(phases.backend_ready));
}

}  // namespace dtlaunch::ddp::detail
