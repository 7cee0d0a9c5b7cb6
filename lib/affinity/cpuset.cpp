#include "affinity/cpuset.hpp"

#include <algorithm>
#include <iterator>

#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::affinity {

CpuSet::CpuSet(std::vector<unsigned> ids) : ids_(std::move(ids)) {
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
}

std::optional<CpuSet> CpuSet::parse(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::vector<unsigned> ids;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    const std::size_t dash = item.find('-');
    auto lo = core::parse_uint(item.substr(0, dash), kMaxCpuNumber);
    auto hi = dash == std::string_view::npos
                  ? lo
                  : core::parse_uint(item.substr(dash + 1), kMaxCpuNumber);
    if (!lo || !hi || *lo > *hi) return std::nullopt;
    for (auto id = *lo; id <= *hi; ++id) ids.push_back(static_cast<unsigned>(id));
    pos = comma + 1;
    if (comma + 1 == text.size()) return std::nullopt;  // a trailing comma
  }
  return CpuSet(std::move(ids));
}

bool CpuSet::contains(unsigned id) const {
  return std::binary_search(ids_.begin(), ids_.end(), id);
}

bool CpuSet::contains(const CpuSet& other) const {
  return std::includes(ids_.begin(), ids_.end(), other.ids_.begin(), other.ids_.end());
}

bool CpuSet::intersects(const CpuSet& other) const {
  return !(*this & other).empty();
}

CpuSet CpuSet::operator&(const CpuSet& other) const {
  CpuSet out;
  std::set_intersection(ids_.begin(), ids_.end(), other.ids_.begin(), other.ids_.end(),
                        std::back_inserter(out.ids_));
  return out;
}

CpuSet CpuSet::operator|(const CpuSet& other) const {
  CpuSet out;
  std::set_union(ids_.begin(), ids_.end(), other.ids_.begin(), other.ids_.end(),
                 std::back_inserter(out.ids_));
  return out;
}

std::string CpuSet::to_list() const {
  return core::compact_ranges({ids_.begin(), ids_.end()});
}

}  // namespace dtlaunch::affinity
