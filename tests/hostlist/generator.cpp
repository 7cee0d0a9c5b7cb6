#include "generator.hpp"

#include <algorithm>

namespace dtlaunch::hostlist::test {

std::string Generator::text() {
  static const char* const kPieces[] = {"n", "gpu", "a",  "b", "-",  ".", "_",     "x",    "r1",
                                        "0", "7",   "ib", "]", "\r", "+", "node-", "login"};
  std::string s;
  const std::uint64_t n = pick(3);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t p = pick(std::size(kPieces));
    // The rare pieces stay rare.
    if ((p == 12 || p == 13) && !chance(15)) continue;
    s += kPieces[p];
  }
  return s;
}

std::string Generator::number(std::uint64_t value) {
  std::string s = std::to_string(value);
  if (chance(30)) s.insert(0, pick(4), '0');
  return s;
}

// small: for tokens with several groups, whose cross product must stay a few hundred hosts
// (22.05 takes minutes on cross products of 65536 prefixes).
std::string Generator::item(bool small) {
  const std::uint64_t kind = pick(100);
  if (kind < 3) {
    static const char* const kJunk[] = {"",     "x",   " 1",    "+1",   "1a-2", "1-",
                                        "1--2", "-1",  "1a",    "1- 2", "1-2 ", "\t3",
                                        "1-a",  "5-3", "1.5-2", "+ 1",  "1-+2", "q"};
    return kJunk[pick(std::size(kJunk))];
  }
  if (kind < 4 && !small) {
    static const char* const kEdges[] = {
        "18446744073709551615",  "18446744073709551614-18446744073709551615",
        "18446744073709551616",  "0-18446744073709551615",
        "4294967295-4294967296", "99999999999999999999"};
    return kEdges[pick(std::size(kEdges))];
  }
  if (kind < 6 && !small) {
    static const std::uint64_t kBig[] = {65530, 4294967290ULL, 18446744073709551600ULL};
    const std::uint64_t lo = kBig[pick(std::size(kBig))] + pick(8);
    const std::uint64_t hi = lo + pick(8);
    return number(lo) + "-" + std::to_string(hi);
  }
  if (kind < 7 && !small) return "1-" + std::to_string(65530 + pick(12));  // around MAX_RANGE
  const std::uint64_t lo = pick(110);
  if (chance(45)) return number(lo);
  const std::uint64_t hi = lo + pick(small ? 4 : 12);
  return number(lo) + "-" + number(hi);
}

std::string Generator::token() {
  std::string t = text();
  if (chance(30)) {  // a literal name
    if (chance(70)) t += number(pick(120));
    return t.empty() ? "n1" : t;
  }
  const std::uint64_t groups = 1 + pick(chance(25) ? 3 : 1);
  for (std::uint64_t g = 0; g < groups; ++g) {
    if (g > 0) t += text();
    t += '[';
    const std::uint64_t items = 1 + pick(groups > 1 ? 2 : 3);
    for (std::uint64_t i = 0; i < items; ++i) {
      if (i > 0) t += chance(90) ? "," : ", ";
      t += item(groups > 1);
    }
    if (g + 1 < groups || !chance(3)) t += ']';  // sometimes unclosed
  }
  if (chance(4)) t += text() + "x";  // a suffix
  return t;
}

std::string Generator::expression() {
  static const char* const kSeparators[] = {",", ",", ",", " ", "\t", ",,", " , "};
  std::string e;
  if (chance(5)) e += kSeparators[pick(std::size(kSeparators))];
  const std::uint64_t tokens = 1 + pick(4);
  for (std::uint64_t i = 0; i < tokens; ++i) {
    if (i > 0) e += kSeparators[pick(std::size(kSeparators))];
    e += token();
  }
  if (chance(5)) e += kSeparators[pick(std::size(kSeparators))];
  return e;
}

std::vector<std::string> Generator::names() {
  static const char* const kPrefixes[] = {"n", "gpu", "a-b", "x.", "", "r1n", "n0", "login"};
  std::vector<std::string> out;
  const std::uint64_t runs = 1 + pick(5);
  for (std::uint64_t r = 0; r < runs; ++r) {
    const std::string prefix = kPrefixes[pick(std::size(kPrefixes))];
    if (chance(10)) {  // a name without a number
      out.push_back(prefix.empty() ? "login" : prefix + "z");
      continue;
    }
    const std::size_t width = chance(40) ? 1 + pick(4) : 0;
    std::uint64_t v = pick(chance(10) ? 1200 : 40);
    const std::uint64_t length = 1 + pick(8);
    for (std::uint64_t k = 0; k < length; ++k) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(prefix + digits);
      const std::uint64_t step = pick(10);
      v = step < 7 ? v + 1 : step < 8 ? v : step < 9 ? v + 2 + pick(5) : (v > 3 ? v - 3 : 0);
    }
  }
  if (chance(20)) std::shuffle(out.begin(), out.end(), rng_);
  return out;
}

}  // namespace dtlaunch::hostlist::test
