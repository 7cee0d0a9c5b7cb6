#include "core/parse.hpp"

#include <charconv>
#include <string>

#include "core/error.hpp"

namespace dtlaunch::core {

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
  double seconds = -1;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, seconds);
  if (text.empty() || ec != std::errc{} || stop != end || !(seconds >= 0) ||
      !(seconds <= max_seconds))
    throw Error::bad_env(
        name, text, "expected seconds in 0.." + std::to_string(static_cast<long>(max_seconds)));
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

}  // namespace dtlaunch::core
