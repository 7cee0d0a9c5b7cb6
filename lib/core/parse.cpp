#include "core/parse.hpp"

#include <charconv>
#include <string>

#include "core/error.hpp"

namespace dtlaunch {

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

}  // namespace dtlaunch
