// Slurm's hostlist keeps a list of ranges (prefix, lo-hi, zero-padding width) and joins each new
// range onto the previous one when the prefixes compare equal, the numbers are adjacent and the
// widths are compatible (hostlist_push_range, _width_equiv). Joining never changes a number as
// printed, but it does change which prefix a host is printed with (prefixes compare equal across
// blanks: "a\r1,a2" expands to "a\r1,a\r2"), and it decides what `show hostlist` prints. Joiner
// reproduces that decision; RangeList keeps the whole list and prints it as Slurm does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::hostlist::detail {

enum class Push {
  kStarted,    // a new range
  kJoined,     // appended to the previous range, whose prefix it now carries
  kWraps,      // would join 2^64-1 to 0: Slurm prints truncated names; the caller must refuse
  kEndsAtMax,  // the range now ends at 2^64-1 with 2+ hosts: Slurm crashes; the caller must refuse
};

class Joiner {
 public:
  Push push(std::string_view prefix, std::uint64_t lo, std::uint64_t hi, std::size_t width);
  // A name without trailing digits: never joined, and nothing joins onto it.
  void push_single() noexcept { has_range_ = false; }

  std::string_view prefix() const noexcept { return prefix_; }
  std::uint64_t lo() const noexcept { return lo_; }
  std::uint64_t hi() const noexcept { return hi_; }
  std::size_t width() const noexcept { return width_; }

 private:
  bool has_range_ = false;
  std::string prefix_;
  std::uint64_t lo_ = 0;
  std::uint64_t hi_ = 0;
  std::size_t width_ = 0;
};

// The range list of `scontrol show hostlist`, printed by hostlist_ranged_string's rules:
// consecutive ranges with equal prefixes share one bracket, "lo-hi" padded to the range's width.
class RangeList {
 public:
  Push push(std::string_view prefix, std::uint64_t lo, std::uint64_t hi, std::size_t width);
  void push_single(std::string_view name);
  std::string render() const;

 private:
  struct Entry {
    std::size_t prefix_at = 0;
    std::size_t prefix_len = 0;
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    std::size_t width = 0;
    bool single = false;
  };
  std::string_view prefix_of(const Entry& e) const {
    return std::string_view(arena_).substr(e.prefix_at, e.prefix_len);
  }
  bool same_bracket(const Entry& a, const Entry& b) const;

  Joiner joiner_;
  std::vector<Entry> entries_;
  std::string arena_;  // all prefixes, back to back
};

}  // namespace dtlaunch::hostlist::detail
