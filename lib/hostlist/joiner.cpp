#include "hostlist/joiner.hpp"

#include "hostlist/text.hpp"

namespace dtlaunch::hostlist::detail {
namespace {

// Zeros printf("%0*lu", width, n) puts in front of n.
std::size_t zero_padding(std::uint64_t n, std::size_t width) {
  const auto d = static_cast<std::size_t>(digits_of(n));
  return width > d ? width - d : 0;
}

// Slurm's _width_equiv: two widths are compatible when one of them can be used for both numbers
// without changing how either prints; the width that would change is then overwritten.
bool width_equiv(std::uint64_t n, std::size_t& wn, std::uint64_t m, std::size_t& wm) {
  if (wn == wm) return true;
  const bool n_changes = zero_padding(n, wn) != zero_padding(n, wm);
  const bool m_changes = zero_padding(m, wm) != zero_padding(m, wn);
  if (n_changes && m_changes) return false;
  if (n_changes)
    wm = wn;
  else
    wn = wm;
  return true;
}

}  // namespace

Push Joiner::push(std::string_view prefix, std::uint64_t lo, std::uint64_t hi, std::size_t width) {
  // Same order of tests as Slurm, because the width test has a side effect on the tail.
  bool joins = false;
  if (has_range_ && hi_ + 1 == lo && (prefix_ == prefix || nat_equal(prefix_, prefix))) {
    std::size_t new_width = width;
    joins = width_equiv(lo_, width_, lo, new_width);
  }
  if (joins) {
    if (hi_ == kMaxNumber) return Push::kWraps;
    hi_ = hi;
  } else {
    has_range_ = true;
    prefix_.assign(prefix);
    lo_ = lo;
    hi_ = hi;
    width_ = width;
  }
  if (hi_ == kMaxNumber && lo_ != hi_) return Push::kEndsAtMax;
  return joins ? Push::kJoined : Push::kStarted;
}

Push RangeList::push(std::string_view prefix, std::uint64_t lo, std::uint64_t hi,
                     std::size_t width) {
  // On kWraps and kEndsAtMax the caller refuses the whole list, so the list is left as it is.
  const Push result = joiner_.push(prefix, lo, hi, width);
  if (result == Push::kJoined) {
    entries_.back().hi = joiner_.hi();
    entries_.back().width = joiner_.width();
  } else if (result == Push::kStarted) {
    entries_.push_back({arena_.size(), prefix.size(), lo, hi, width, false});
    arena_.append(prefix);
  }
  return result;
}

void RangeList::push_single(std::string_view name) {
  joiner_.push_single();
  entries_.push_back({arena_.size(), name.size(), 0, 0, 0, true});
  arena_.append(name);
}

bool RangeList::same_bracket(const Entry& a, const Entry& b) const {
  return !a.single && !b.single && nat_equal(prefix_of(a), prefix_of(b));
}

std::string RangeList::render() const {
  std::string out;
  out.reserve(arena_.size() + entries_.size() * 8);
  std::size_t i = 0;
  while (i < entries_.size()) {
    if (i > 0) out.push_back(',');
    const std::size_t first = i;
    const Entry& head = entries_[i];
    const bool bracket = (!head.single && head.hi != head.lo) ||
                         (i + 1 < entries_.size() && same_bracket(head, entries_[i + 1]));
    out.append(prefix_of(head));
    if (bracket) out.push_back('[');
    do {
      const Entry& e = entries_[i];
      if (i > first) out.push_back(',');
      if (!e.single) {
        append_number(out, e.lo, e.width);
        if (e.lo < e.hi) {
          out.push_back('-');
          append_number(out, e.hi, e.width);
        }
      }
      ++i;
    } while (i < entries_.size() && same_bracket(entries_[i], entries_[i - 1]));
    if (bracket) out.push_back(']');
  }
  return out;
}

}  // namespace dtlaunch::hostlist::detail
