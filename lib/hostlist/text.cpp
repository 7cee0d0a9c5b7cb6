#include "hostlist/text.hpp"

#include <array>

#include "core/text.hpp"

namespace dtlaunch::hostlist::detail {

int digits_of(std::uint64_t v) noexcept {
  int n = 1;
  while (v >= 10) {
    v /= 10;
    ++n;
  }
  return n;
}

void append_number(std::string& out, std::uint64_t v, std::size_t width) {
  std::array<char, 20> buf{};
  std::size_t n = 0;
  do {
    buf[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  if (width > n) out.append(width - n, '0');
  while (n > 0) out.push_back(buf[--n]);
}

std::uint64_t printed_length_sum(std::uint64_t lo, std::uint64_t hi, std::size_t width) noexcept {
  // Walk the decades [10^k, 10^(k+1)) that [lo, hi] crosses: at most 20 steps.
  unsigned __int128 total = 0;
  std::uint64_t v = lo;
  while (true) {
    const int d = digits_of(v);
    std::uint64_t decade_end = UINT64_MAX;  // last number with d digits
    if (d < 20) {
      std::uint64_t p = 1;
      for (int i = 0; i < d; ++i) p *= 10;
      decade_end = p - 1;
    }
    const std::uint64_t last = hi < decade_end ? hi : decade_end;
    const auto len = static_cast<unsigned __int128>(printed_length(v, width));
    total += (static_cast<unsigned __int128>(last - v) + 1) * len;
    if (total > UINT64_MAX) return UINT64_MAX;
    if (last == hi) break;
    v = last + 1;
  }
  return static_cast<std::uint64_t>(total);
}

bool nat_equal(std::string_view a, std::string_view b) noexcept {
  std::size_t i = 0;
  std::size_t j = 0;
  while (true) {
    while (i < a.size() && is_space(a[i])) ++i;
    while (j < b.size() && is_space(b[j])) ++j;
    const char ca = i < a.size() ? a[i] : '\0';
    const char cb = j < b.size() ? b[j] : '\0';
    if (is_digit(ca) && is_digit(cb)) {
      // strnatcmp compares the two digit runs as numbers; it returns 0 only for identical runs.
      std::size_t x = i;
      std::size_t y = j;
      while (x < a.size() && y < b.size() && is_digit(a[x]) && is_digit(b[y])) {
        if (a[x] != b[y]) return false;
        ++x;
        ++y;
      }
      const bool more_a = x < a.size() && is_digit(a[x]);
      const bool more_b = y < b.size() && is_digit(b[y]);
      if (more_a != more_b) return false;
    }
    if (ca == '\0' && cb == '\0') return true;
    if (ca != cb) return false;
    ++i;
    ++j;
  }
}

std::string quote(std::string_view text) {
  return '"' + core::excerpt(text, text.size(), core::Quote::kDouble) + '"';
}

void fail(std::string_view expr, std::size_t offset, Reason reason, std::string_view what) {
  // Quote the whole expression when it is short, otherwise the part around the offending
  // character, so that the message stays one readable line.
  constexpr std::size_t kWhole = 100;
  constexpr std::size_t kContext = 40;
  std::string shown;
  if (expr.size() <= kWhole) {
    shown = quote(expr);
  } else {
    const std::size_t from = offset > kContext ? offset - kContext : 0;
    const std::size_t to = offset + kContext < expr.size() ? offset + kContext : expr.size();
    shown = quote(expr.substr(from, to - from));
    if (from > 0) shown.insert(1, "...");
    if (to < expr.size()) shown.insert(shown.size() - 1, "...");
    shown += " (" + std::to_string(expr.size()) + " bytes)";
  }
  std::string msg = "invalid hostlist " + shown + ": " + std::string(what);
  if (offset < expr.size()) {
    msg +=
        " at character " + std::to_string(offset + 1) + " (" + quote(expr.substr(offset, 1)) + ")";
  } else {
    msg += " at the end";
  }
  throw ParseError(reason, offset, std::move(msg));
}

}  // namespace dtlaunch::hostlist::detail
