#include "settings.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "dtlaunch/ddp.h"

extern char** environ;

namespace dtlaunch::ddp::detail {

RuntimeSettings RuntimeSettings::read(const core::EnvMap& env, int world_size) {
  try {
    RuntimeSettings s;
    s.monitor = MonitorSettings::read(env, world_size);
    s.shm_all_reduce = contract::read_switch(env, contract::setting::kShm, true);
    s.hier_all_reduce = contract::read_switch(env, contract::setting::kHier, true);
    s.live = contract::read_switch(env, contract::setting::kLive, false);
    s.live_join = contract::read_switch(env, contract::setting::kLiveJoin, false);
    if (auto wait = contract::read_number(env, contract::setting::kLiveWait))
      s.live_wait = std::chrono::seconds(*wait);
    return s;
  } catch (const core::Error& e) {
    throw Error(ErrorKind::kConfig, std::string("dtlaunch ddp: ") + e.what());
  }
}

RuntimeSettings RuntimeSettings::from_environment(int world_size) {
  return read(core::EnvMap::from_environ(environ), world_size);
}

bool set_in_environment(const contract::Setting& setting) {
  return core::EnvMap::from_environ(environ).has_entry(setting.name);
}

int automatic_gloo_threads(unsigned allowed_cpus, unsigned node_cpus, int local_world_size) {
  // Gloo's worker threads compete with the ranks' compute for the cores; a second thread only
  // pays where cores are to spare. A mask narrower than the node is taken as this rank's own
  // share (what per-rank binding gives); a whole-node mask is shared by the local ranks.
  const unsigned ranks = static_cast<unsigned>(std::max(1, local_world_size));
  const unsigned mine = allowed_cpus < node_cpus ? allowed_cpus : allowed_cpus / ranks;
  return mine >= 4u ? 2 : 1;
}

}  // namespace dtlaunch::ddp::detail
