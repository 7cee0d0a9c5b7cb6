#include "core/env_map.hpp"

#include <cstring>

namespace dtlaunch::core {

EnvMap EnvMap::from_environ(const char* const* envp) {
  EnvMap env;
  if (envp == nullptr) return env;
  for (; *envp != nullptr; ++envp) {
    const char* eq = std::strchr(*envp, '=');
    if (eq == nullptr) continue;
    env.vars_.try_emplace(std::string(*envp, eq), std::string(eq + 1));
  }
  return env;
}

std::optional<std::string_view> EnvMap::get(std::string_view name) const {
  auto value = get_raw(name);
  if (!value || value->empty()) return std::nullopt;
  return value;
}

std::optional<std::string_view> EnvMap::get_raw(std::string_view name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return std::string_view(it->second);
}

void EnvMap::erase(std::string_view name) {
  auto it = vars_.find(name);
  if (it != vars_.end()) vars_.erase(it);
}

std::vector<std::string> EnvMap::to_strings() const {
  std::vector<std::string> out;
  out.reserve(vars_.size());
  for (const auto& [name, value] : vars_) out.push_back(name + "=" + value);
  return out;
}

}  // namespace dtlaunch::core
