// Seeded random hostlist expressions and host-name lists for the differential tests: small
// enough to run thousands against scontrol, biased towards the corners of Slurm's parser
// (padding, adjacent and repeated ranges, several groups, blanks, junk, unclosed brackets,
// numbers near 2^16, 2^32 and 2^64).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dtlaunch::hostlist::test {

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  std::string expression();
  // Plain names (no brackets or blanks) as a launcher would hold them.
  std::vector<std::string> names();

 private:
  bool chance(std::uint64_t percent) { return pick(100) < percent; }
  std::uint64_t pick(std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_);
  }
  std::string text();
  std::string number(std::uint64_t value);
  std::string item(bool small);
  std::string token();

  std::mt19937_64 rng_;
};

}  // namespace dtlaunch::hostlist::test
