#include <string>
#include <vector>

#include "hostlist/expand_check.hpp"
#include "hostlist/hostlist.hpp"
#include "hostlist/joiner.hpp"
#include "hostlist/text.hpp"
#include "hostlist/walk.hpp"

namespace dtlaunch::hostlist {
namespace {

[[noreturn]] void unwritable(std::size_t index, std::string_view name, Reason reason,
                             std::string_view why) {
  throw ParseError(reason, index,
                   "cannot write host name " + detail::quote(name) + " (name " +
                       std::to_string(index + 1) + ") in a hostlist: " + std::string(why));
}

// A name that, written as it is, Slurm's parser reads back as exactly that one host.
void check_writable(std::size_t index, std::string_view name) {
  if (name.empty()) unwritable(index, name, Reason::kNotWritable, "it is empty");
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    // Blanks are refused too: Slurm compares prefixes ignoring them, and would print the next
    // name with this one's prefix.
    if (c == ',' || c == '[' || c == ']' || c == '\0' || detail::is_space(c))
      unwritable(index, name, Reason::kNotWritable,
                 "character " + std::to_string(i + 1) + " is " + detail::quote(name.substr(i, 1)));
  }
  std::size_t d = name.size();
  while (d > 0 && detail::is_digit(name[d - 1])) --d;
  std::uint64_t value = 0;
  for (std::size_t k = d; k < name.size(); ++k) {
    const auto digit = static_cast<std::uint64_t>(name[k] - '0');
    if (value > (detail::kMaxNumber - digit) / 10)
      unwritable(index, name, Reason::kNotWritable, "its number is above 18446744073709551615");
    value = value * 10 + digit;
  }
}

class ListBuilder {
 public:
  explicit ListBuilder(std::string_view expr) : expr_(expr) {}
  void range(std::string_view prefix, std::uint64_t lo, std::uint64_t hi, std::size_t width,
             std::size_t offset) {
    detail::refuse(expr_, offset, list.push(prefix, lo, hi, width));
  }
  void single(std::string_view name) { list.push_single(name); }

  detail::RangeList list;

 private:
  std::string_view expr_;
};

}  // namespace

std::string compress(const std::vector<std::string>& hosts) {
  // Every name is checked before any is joined, so that an unwritable name is always reported
  // as such, whatever comes before it.
  for (std::size_t i = 0; i < hosts.size(); ++i) check_writable(i, hosts[i]);
  detail::RangeList list;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string_view name = hosts[i];
    std::size_t d = name.size();
    while (d > 0 && detail::is_digit(name[d - 1])) --d;
    if (d == name.size()) {
      list.push_single(name);
      continue;
    }
    std::uint64_t value = 0;
    for (std::size_t k = d; k < name.size(); ++k)
      value = value * 10 + static_cast<std::uint64_t>(name[k] - '0');
    switch (list.push(name.substr(0, d), value, value, name.size() - d)) {
      case detail::Push::kWraps:
        unwritable(i, name, Reason::kNumberWraps,
                   "number 0 after 18446744073709551615 (Slurm 22.05 prints it truncated)");
      case detail::Push::kEndsAtMax:
        unwritable(i, name, Reason::kMaxNumberRange,
                   "a run of hosts up to 18446744073709551615 (Slurm 22.05 crashes on it)");
      default:
        break;
    }
  }
  return list.render();
}

std::string recompress(std::string_view expr, Syntax syntax) {
  const detail::Plan plan = detail::check(expr, syntax);
  ListBuilder builder(expr);
  detail::walk(plan, builder);
  return builder.list.render();
}

}  // namespace dtlaunch::hostlist
