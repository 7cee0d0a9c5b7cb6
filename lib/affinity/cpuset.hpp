// A set of CPU (or NUMA node) numbers as the kernel numbers them, and its Linux list form
// ("0-3,8-11", what Cpus_allowed_list, taskset -c and srun --cpu-bind=map_cpu speak). A value:
// sorted, without duplicates.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::affinity {

// Kernel CPU and node numbers stop well below this (CONFIG_NR_CPUS is at most 8192); a larger
// number in a list is a typo or garbage, not a machine.
inline constexpr unsigned kMaxCpuNumber = 65535;

class CpuSet {
 public:
  CpuSet() = default;
  explicit CpuSet(std::vector<unsigned> ids);

  // "0-3,8-11"; nullopt when the text is not such a list (an empty text is the empty set).
  static std::optional<CpuSet> parse(std::string_view text);

  const std::vector<unsigned>& ids() const { return ids_; }
  bool empty() const { return ids_.empty(); }
  std::size_t size() const { return ids_.size(); }
  bool contains(unsigned id) const;
  bool contains(const CpuSet& other) const;
  bool intersects(const CpuSet& other) const;
  CpuSet operator&(const CpuSet& other) const;
  CpuSet operator|(const CpuSet& other) const;
  std::string to_list() const;  // "" for the empty set
  bool operator==(const CpuSet&) const = default;

 private:
  std::vector<unsigned> ids_;
};

}  // namespace dtlaunch::affinity
