#include "settings.hpp"

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

}  // namespace dtlaunch::ddp::detail
