#include "core/parse.hpp"

#include <locale.h>

#include <charconv>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace dtlaunch::core {

namespace {

// A decimal number as std::from_chars reads one ("1", "0.25", ".5", "2e3", "-0"), converted by
// strtod in the "C" locale: from_chars for double is GCC 11's, and the release launcher is
// built with bullseye's GCC 10 for its glibc floor (scripts/package.sh). The syntax is checked
// first, so that what strtod alone would take ("0x1p3", "inf", " 1", "+1") is refused as before.
std::optional<double> parse_decimal(std::string_view text) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && text[i] == '-') ++i;
  std::size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  static const locale_t c_locale = ::newlocale(LC_ALL_MASK, "C", locale_t{});
  const std::string copy(text);
  char* end = nullptr;
  const double value = ::strtod_l(copy.c_str(), &end, c_locale);
  if (end != copy.c_str() + copy.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::uint64_t> parse_uint(std::string_view text, std::uint64_t max) noexcept {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

std::uint64_t parse_uint_var(std::string_view name, std::string_view text, std::uint64_t max) {
  if (auto v = parse_uint(text, max)) return *v;
  std::string why = "expected a non-negative integer";
  if (max != UINT64_MAX) why += " no larger than " + std::to_string(max);
  throw Error::bad_env(name, text, why);
}

std::uint64_t parse_count(std::string_view name, std::string_view text, std::uint64_t min,
                          std::uint64_t max) {
  const auto value = parse_uint(text, max);
  if (!value || *value < min)
    throw Error::bad_env(
        name, text, "expected an integer in " + std::to_string(min) + ".." + std::to_string(max));
  return *value;
}

std::chrono::milliseconds parse_seconds(std::string_view name, std::string_view text,
                                        double max_seconds) {
  const double seconds = parse_decimal(text).value_or(-1);
  if (!(seconds >= 0) || !(seconds <= max_seconds))
    throw Error::bad_env(
        name, text, "expected seconds in 0.." + std::to_string(static_cast<long>(max_seconds)));
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

}  // namespace dtlaunch::core
