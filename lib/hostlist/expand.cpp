// Expansion in two passes over the parsed expression: the first checks what depends on
// neighbouring ranges (Slurm's 2^64-1 bugs, the byte bound after prefix joining) without building
// any name; the second builds the names. So an invalid expression never yields a partial list.
#include <string>
#include <vector>

#include "hostlist/expand_check.hpp"
#include "hostlist/hostlist.hpp"
#include "hostlist/joiner.hpp"
#include "hostlist/plan.hpp"
#include "hostlist/text.hpp"
#include "hostlist/walk.hpp"

namespace dtlaunch::hostlist {
namespace detail {

void refuse(std::string_view expr, std::size_t offset, Push result) {
  if (result == Push::kWraps)
    fail(expr, offset, Reason::kNumberWraps,
         "host number 0 follows 18446744073709551615 with the same prefix (Slurm 22.05 prints "
         "truncated names for it)");
  if (result == Push::kEndsAtMax)
    fail(expr, offset, Reason::kMaxNumberRange,
         "several hosts up to number 18446744073709551615 (Slurm 22.05 crashes on it)");
}

namespace {

class Checker {
 public:
  explicit Checker(const Plan& plan) : plan_(plan), chars_(plan.chars) {}

  void range(std::string_view prefix, std::uint64_t lo, std::uint64_t hi, std::size_t width,
             std::size_t offset) {
    const Push result = joiner_.push(prefix, lo, hi, width);
    refuse(plan_.expr, offset, result);
    const std::size_t joined = joiner_.prefix().size();
    if (result == Push::kJoined && joined != prefix.size()) {
      // These hosts are printed with the earlier, differently spelled prefix.
      using u128 = unsigned __int128;
      const u128 hosts = u128{hi - lo} + 1;
      const u128 now = chars_;
      const u128 after = joined > prefix.size() ? now + hosts * (joined - prefix.size())
                                                : now - hosts * (prefix.size() - joined);
      if (after > kMaxChars)
        fail(plan_.expr, offset, Reason::kTooManyHosts,
             "expands to more than " + std::to_string(kMaxChars) +
                 " bytes of names (dtlaunch's limit)");
      chars_ = static_cast<std::uint64_t>(after);
    }
  }
  void single(std::string_view) { joiner_.push_single(); }

 private:
  const Plan& plan_;
  Joiner joiner_;
  std::uint64_t chars_;
};

// Builds each host in one buffer: the prefix Slurm prints it with, then the number, counted up
// in place like an odometer instead of being formatted again for every host.
template <typename Emit>
class Builder {
 public:
  explicit Builder(Emit& emit) : emit_(emit) {}

  void range(std::string_view prefix, std::uint64_t lo, std::uint64_t hi, std::size_t width,
             std::size_t) {
    joiner_.push(prefix, lo, hi, width);  // same answers as in the check pass
    const std::string_view shown = joiner_.prefix();
    buf_.assign(shown);
    append_number(buf_, lo, width);
    const std::size_t number_at = shown.size();
    for (std::uint64_t v = lo;; ++v) {
      emit_(std::string_view(buf_));
      if (v == hi) break;
      increment(number_at);
    }
  }
  void single(std::string_view name) {
    joiner_.push_single();
    emit_(name);
  }

 private:
  void increment(std::size_t number_at) {
    std::size_t i = buf_.size();
    while (i > number_at) {
      --i;
      if (buf_[i] != '9') {
        ++buf_[i];
        return;
      }
      buf_[i] = '0';
    }
    // All nines, so no padding left: the number grows by one digit.
    buf_.insert(buf_.begin() + static_cast<std::ptrdiff_t>(number_at), '1');
  }

  Emit& emit_;
  Joiner joiner_;
  std::string buf_;
};

Plan checked_plan(std::string_view expr, Syntax syntax) {
  Plan plan = parse(expr, syntax);
  Checker checker(plan);
  walk(plan, checker);
  return plan;
}

}  // namespace

Plan check(std::string_view expr, Syntax syntax) {
  return checked_plan(expr, syntax);
}

void visit_hosts(std::string_view expr, Syntax syntax, HostCallback callback, void* context) {
  const Plan plan = checked_plan(expr, syntax);
  auto emit = [&](std::string_view host) { callback(context, host); };
  Builder<decltype(emit)> builder(emit);
  walk(plan, builder);
}

}  // namespace detail

std::vector<std::string> expand(std::string_view expr, Syntax syntax) {
  const detail::Plan plan = detail::checked_plan(expr, syntax);
  std::vector<std::string> hosts;
  hosts.reserve(plan.hosts);
  auto emit = [&](std::string_view host) { hosts.emplace_back(host); };
  detail::Builder<decltype(emit)> builder(emit);
  detail::walk(plan, builder);
  return hosts;
}

std::vector<std::string> expand(std::string_view expr) {
  return expand(expr, Syntax::kCurrent);
}

std::uint64_t count(std::string_view expr, Syntax syntax) {
  return detail::checked_plan(expr, syntax).hosts;
}

}  // namespace dtlaunch::hostlist
