// Character-level helpers shared by the hostlist parser, expander and compressor: C-locale
// character classes, zero-padded numbers, Slurm's prefix comparison, and error messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hostlist/hostlist.hpp"

namespace dtlaunch::hostlist::detail {

inline constexpr std::uint64_t kMaxNumber = UINT64_MAX;

// isdigit/isspace of the C locale, which is what Slurm's parser runs under.
inline bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}
inline bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Number of decimal digits of v (1 for 0).
int digits_of(std::uint64_t v) noexcept;

// The length of printf("%0*lu", width, v).
inline std::size_t printed_length(std::uint64_t v, std::size_t width) noexcept {
  const auto d = static_cast<std::size_t>(digits_of(v));
  return width > d ? width : d;
}

// Appends printf("%0*lu", width, v).
void append_number(std::string& out, std::uint64_t v, std::size_t width);

// Sum of printed_length(v, width) over v in [lo, hi], saturating at UINT64_MAX.
std::uint64_t printed_length_sum(std::uint64_t lo, std::uint64_t hi, std::size_t width) noexcept;

// Whether Slurm's strnatcmp() calls the two prefixes equal. It skips blanks (so "a\r" and "a"
// are equal) but compares runs of digits whole. Slurm joins ranges whose prefixes compare equal,
// so this decides which prefix a host is printed with.
bool nat_equal(std::string_view a, std::string_view b) noexcept;

// Throws ParseError: `invalid hostlist "EXPR": WHAT at character N ('C')`, on one line (control
// characters escaped, long expressions cut around the offending character).
[[noreturn]] void fail(std::string_view expr, std::size_t offset, Reason reason,
                       std::string_view what);

// Quotes text for a one-line message: "..." with \n, \t, \r, \", \\ and \xHH escapes.
std::string quote(std::string_view text);

}  // namespace dtlaunch::hostlist::detail
