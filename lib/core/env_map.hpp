// A snapshot of an environment as a value. main() takes one snapshot of environ and passes it
// down, and the DDP runtime takes its own (WorkerEnv::from_environment), so every decision is a
// pure function of its inputs: lib/ calls no getenv.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::core {

class EnvMap {
 public:
  EnvMap() = default;
  EnvMap(std::initializer_list<std::pair<const std::string, std::string>> init) : vars_(init) {}

  // Copies a NULL-terminated "NAME=value" array (environ). Entries without '=' are skipped;
  // for a repeated name the first one wins, as getenv() does.
  static EnvMap from_environ(const char* const* envp);

  // The value, or nullopt when unset. A variable set to the empty string counts as unset, as
  // it does for most shells' ${VAR:-default}: "OMP_NUM_THREADS=" must get the default, not
  // pass an empty value on (docs/environment.md).
  std::optional<std::string_view> get(std::string_view name) const;
  bool contains(std::string_view name) const { return get(name).has_value(); }
  // The value even when empty, for the few variables whose empty value means something of its
  // own (CUDA_VISIBLE_DEVICES= hides every GPU) and for removing inherited entries.
  std::optional<std::string_view> get_raw(std::string_view name) const;
  bool has_entry(std::string_view name) const { return vars_.find(name) != vars_.end(); }
  void set(std::string name, std::string value) { vars_[std::move(name)] = std::move(value); }
  void erase(std::string_view name);

  // "NAME=value" strings in name order, for execve. The caller keeps them alive while the
  // pointer array built from them is in use.
  std::vector<std::string> to_strings() const;

  const std::map<std::string, std::string, std::less<>>& vars() const { return vars_; }
  bool operator==(const EnvMap&) const = default;

 private:
  std::map<std::string, std::string, std::less<>> vars_;
};

}  // namespace dtlaunch::core
