// Strict number parsing for values that come from the environment or the command line.
// Unlike atoi/strtol, nothing is accepted but optional leading '+'-free decimal digits that
// fit the type: "8 ", "0x10", "-1" and "" are errors, and the error names the input.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dtlaunch::core {

// Parses a non-negative decimal integer with no sign, no blanks and no trailing text.
// Returns nullopt when the text is not such a number or exceeds max.
std::optional<std::uint64_t> parse_uint(std::string_view text,
                                        std::uint64_t max = UINT64_MAX) noexcept;

// As parse_uint, but throws Error::bad_env(name, text, ...) naming the variable on failure.
std::uint64_t parse_uint_var(std::string_view name, std::string_view text,
                             std::uint64_t max = UINT64_MAX);

// An option's integer in min..max; throws Error::bad_env naming the option and quoting the text
// ("--master-port='99999': expected an integer in 1..65535").
std::uint64_t parse_count(std::string_view name, std::string_view text, std::uint64_t min,
                          std::uint64_t max);

// A duration in decimal seconds (fractions allowed) in 0..max_seconds, to the millisecond;
// throws Error::bad_env ("--grace='1e300': expected seconds in 0..86400").
std::chrono::milliseconds parse_seconds(std::string_view name, std::string_view text,
                                        double max_seconds);

}  // namespace dtlaunch::core
