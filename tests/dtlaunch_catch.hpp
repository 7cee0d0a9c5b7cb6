// The one Catch2 include of the tests: Catch2 v2 (Debian bookworm) and v3 (trixie and later,
// where the LibTorch 2.x check builds) spell the header and the substring matcher differently.
#pragma once

#include <string>

#if DTLAUNCH_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

namespace dtlaunch_test {

// Matches an exception message or a string that contains `text`.
inline auto contains_text(const std::string& text) {
#if DTLAUNCH_CATCH2_MAJOR >= 3
  return Catch::Matchers::ContainsSubstring(text);
#else
  return Catch::Matchers::Contains(text);
#endif
}

}  // namespace dtlaunch_test
