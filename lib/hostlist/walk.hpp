// Replays a parsed expression as the sequence of ranges Slurm pushes onto its hostlist: for a
// token with several groups, the groups' values form a cross product whose loops nest as Slurm's
// recursion does (the group left of the final one outermost, then leftwards, the final group
// innermost). The visitor gets
//   range(prefix, lo, hi, width, token_offset)  hosts prefix+printf("%0*lu", width, v), lo<=v<=hi
//   single(name)                                 one host without trailing digits
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hostlist/plan.hpp"
#include "hostlist/text.hpp"

namespace dtlaunch::hostlist::detail {

// A whole name (a literal, or a name built with a suffix) as Slurm stores it: trailing digits
// become a one-host range, anything else a single host.
template <typename Visitor>
void visit_name(std::string_view expr, std::string_view name, std::size_t offset, Visitor& v) {
  std::size_t d = name.size();
  while (d > 0 && is_digit(name[d - 1])) --d;
  if (d == name.size()) {
    v.single(name);
    return;
  }
  std::uint64_t value = 0;
  for (std::size_t i = d; i < name.size(); ++i) {
    const auto digit = static_cast<std::uint64_t>(name[i] - '0');
    if (value > (kMaxNumber - digit) / 10)
      fail(expr, offset, Reason::kNumberTooLarge,
           "a name ends in a number above 18446744073709551615 (Slurm 22.05 silently changes it)");
    value = value * 10 + digit;
  }
  v.range(name.substr(0, d), value, value, name.size() - d, offset);
}

template <typename Visitor>
void walk(const Plan& plan, Visitor& v) {
  struct Position {
    std::size_t range = 0;  // index into plan.ranges
    std::uint64_t value = 0;
  };
  std::string prefix;
  std::string name;
  std::vector<Position> odometer;
  for (const Token& t : plan.tokens) {
    if (t.literal) {
      if (t.digits == 0)
        v.single(t.head);
      else
        v.range(t.head.substr(0, t.head.size() - t.digits), t.number, t.number, t.digits, t.offset);
      continue;
    }
    const Group* groups = &plan.groups[t.first_group];
    const Group& last = groups[t.prefix_groups];
    odometer.assign(t.prefix_groups, Position{});
    for (std::size_t i = 0; i < t.prefix_groups; ++i)
      odometer[i] = {groups[i].first_range, plan.ranges[groups[i].first_range].lo};
    while (true) {
      prefix.assign(t.head);
      for (std::size_t i = 0; i < t.prefix_groups; ++i) {
        append_number(prefix, odometer[i].value, plan.ranges[odometer[i].range].width);
        prefix.append(groups[i].text_after);
      }
      for (std::size_t r = last.first_range; r < last.first_range + last.range_count; ++r) {
        const Range& range = plan.ranges[r];
        if (t.suffix.empty()) {
          v.range(prefix, range.lo, range.hi, range.width, t.offset);
          continue;
        }
        for (std::uint64_t value = range.lo;; ++value) {
          name.assign(prefix);
          append_number(name, value, range.width);
          name.append(t.suffix);
          visit_name(plan.expr, name, t.offset, v);
          if (value == range.hi) break;
        }
      }
      // Next combination: the leftmost group turns fastest.
      std::size_t i = 0;
      for (; i < t.prefix_groups; ++i) {
        Position& p = odometer[i];
        if (p.value < plan.ranges[p.range].hi) {
          ++p.value;
          break;
        }
        if (p.range + 1 < groups[i].first_range + groups[i].range_count) {
          ++p.range;
          p.value = plan.ranges[p.range].lo;
          break;
        }
        p = {groups[i].first_range, plan.ranges[groups[i].first_range].lo};
      }
      if (i == t.prefix_groups) break;
    }
  }
}

}  // namespace dtlaunch::hostlist::detail
