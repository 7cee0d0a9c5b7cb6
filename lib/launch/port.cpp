#include "launch/port.hpp"

#include <string>

#include "core/error.hpp"
#include "core/parse.hpp"

namespace dtlaunch::launch {

namespace {
// splitmix64's finaliser: a bijection on 64 bits with full avalanche, so job ids that differ in
// one low digit (consecutive submissions) spread over the whole range instead of aliasing the way
// "job_id % 1000" does.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

PortRange parse_port_range(std::string_view source, std::string_view text) {
  std::size_t dash = text.find('-');
  auto lo =
      dash == std::string_view::npos ? std::nullopt : core::parse_uint(text.substr(0, dash), 65535);
  auto hi = dash == std::string_view::npos ? std::nullopt
                                           : core::parse_uint(text.substr(dash + 1), 65535);
  if (!lo || !hi)
    throw core::Error::bad_env(source, text, "expected LO-HI, for example 20000-32767");
  if (*lo < 1024 || *lo > *hi)
    throw core::Error::bad_env(source, text, "need 1024 <= LO <= HI <= 65535");
  return PortRange{static_cast<std::uint16_t>(*lo), static_cast<std::uint16_t>(*hi)};
}

std::uint16_t master_port_for(std::uint64_t job_id, std::uint64_t step_id, std::uint64_t het_offset,
                              PortRange range) {
  const std::uint64_t start = mix64(mix64(job_id) ^ het_offset);
  const std::uint64_t offset = (start % range.size() + step_id % range.size()) % range.size();
  return static_cast<std::uint16_t>(range.lo + offset);
}

}  // namespace dtlaunch::launch
