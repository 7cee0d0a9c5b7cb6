#include "core/text.hpp"

#include <chrono>
#include <csignal>
#include <string>
#include <type_traits>
#include <vector>

#include "core/env_map.hpp"
#include "core/error.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch;
using namespace dtlaunch::core;

TEST_CASE("excerpt escapes what a terminal would act on and keeps valid UTF-8") {
  struct Case {
    std::string in;
    std::string out;
  };
  const Case cases[] = {
      {"plain", "plain"},
      {"a\nb\tc\rd", "a\\nb\\tc\\rd"},
      {"\x1b[2J", "\\x1b[2J"},
      {"it's", "it\\'s"},
      {"back\\slash", "back\\\\slash"},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80"},
      {"\xff\xfe", "\\xff\\xfe"},
      {"\xc3", "\\xc3"},                             // truncated sequence
      {"\xc0\xaf", "\\xc0\\xaf"},                    // overlong '/'
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // UTF-16 surrogate
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
      {std::string("a\0b", 3), "a\\x00b"},
  };
  for (const Case& c : cases) {
    INFO(c.in);
    CHECK(excerpt(c.in) == c.out);
  }
}

// Issue 35 E: '\0' passed as "no quote" made a NUL byte the quote, written raw after a backslash;
// "no quote" is now Quote::kNone, which no character converts to.
TEST_CASE("excerpt escapes only the quote it is given, and a NUL byte always") {
  struct Case {
    std::string in;
    Quote quote;
    std::string out;
  };
  const Case cases[] = {
      {std::string("a\0b", 3), Quote::kNone, "a\\x00b"},
      {std::string("\0", 1), Quote::kNone, "\\x00"},
      {"it's \"q\"", Quote::kNone, "it's \"q\""},
      {std::string("a\0b", 3), Quote::kDouble, "a\\x00b"},
      {"it's \"q\"", Quote::kDouble, "it's \\\"q\\\""},
      {std::string("a\0b", 3), Quote::kSingle, "a\\x00b"},
      {"it's \"q\"", Quote::kSingle, "it\\'s \"q\""},
      {"back\\slash", Quote::kNone, "back\\\\slash"},
  };
  STATIC_REQUIRE(!std::is_convertible_v<char, Quote>);
  for (const Case& c : cases) {
    INFO(excerpt(c.in) << " quote " << static_cast<int>(c.quote));
    CHECK(excerpt(c.in, 80, c.quote) == c.out);
  }
}

TEST_CASE("excerpt cuts long values and says how long they were") {
  CHECK(excerpt(std::string(120000, '7'), 10) == "7777777777... (120000 bytes)");
  CHECK(excerpt(std::string(10, '7'), 10) == "7777777777");
  // Never inside a UTF-8 sequence: a character that starts before the limit is kept whole.
  CHECK(excerpt("ab\xc3\xa9xyz", 3) == "ab\xc3\xa9... (7 bytes)");
}

TEST_CASE("Error::bad_env quotes a short, escaped excerpt of the value") {
  const Error e = Error::bad_env("SLURM_PROCID", std::string(120000, '1') + "\x1b", "bad");
  const std::string what = e.what();
  CHECK(what.size() < 140);
  CHECK(what.rfind("SLURM_PROCID='1111", 0) == 0);
  CHECK(what.find("... (120001 bytes)': bad") != std::string::npos);
}

TEST_CASE("an empty variable counts as unset, get_raw still sees it") {
  const EnvMap env{{"OMP_NUM_THREADS", ""}, {"RANK", "0"}};
  CHECK_FALSE(env.get("OMP_NUM_THREADS"));
  CHECK_FALSE(env.contains("OMP_NUM_THREADS"));
  CHECK(env.get_raw("OMP_NUM_THREADS") == std::string_view{});
  CHECK(env.has_entry("OMP_NUM_THREADS"));
  CHECK(env.get("RANK") == "0");
  CHECK_FALSE(env.get_raw("MISSING"));
}

TEST_CASE("compact_ranges: sorted, each number once, and bounded when asked") {
  struct Case {
    std::vector<std::uint32_t> numbers;
    std::size_t max_ranges;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {{}, 16, ""},
      {{3}, 16, "3"},
      {{7, 0, 1, 2, 4, 5}, 16, "0-2,4-5,7"},
      {{2, 2, 1, 1}, 16, "1-2"},
      {{0, 2, 4, 6, 8}, 2, "0,2, ... (5 in all)"},
      {{0, 1, 2, 9}, 1, "0-2, ... (4 in all)"},
      {{0, 1, 2}, 1, "0-2"},
  };
  for (const Case& c : cases) CHECK(compact_ranges(c.numbers, c.max_ranges) == c.expected);
  CHECK(compact_ranges({5, 4}) == "4-5");
}

TEST_CASE("first_line, as the DDP runtime's messages use it") {
  CHECK(first_line("one\ntwo") == "one");
  CHECK(first_line("one") == "one");
  CHECK(first_line("") == "");
}

TEST_CASE("duration_text: the one format of a duration, configured or measured") {
  using std::chrono::duration;
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  // Configured: exactly as given, in the largest unit it reaches.
  CHECK(core::duration_text(seconds(30)) == "30 s");
  CHECK(core::duration_text(milliseconds(2000)) == "2 s");
  CHECK(core::duration_text(milliseconds(1500)) == "1.5 s");
  CHECK(core::duration_text(milliseconds(300001)) == "300.001 s");
  CHECK(core::duration_text(milliseconds(400)) == "400 ms");
  CHECK(core::duration_text(milliseconds(250)) == "250 ms");
  CHECK(core::duration_text(milliseconds(0)) == "0 us");
  CHECK(core::duration_text(seconds(86400)) == "86400 s");
  // Measured: to a thousandth of the unit, and the unit of the rounded value.
  CHECK(core::duration_text(duration<double>(2.1864)) == "2.186 s");
  CHECK(core::duration_text(duration<double>(3.0)) == "3 s");
  CHECK(core::duration_text(duration<double, std::milli>(1.25)) == "1.25 ms");
  CHECK(core::duration_text(duration<double, std::milli>(20.13749)) == "20.137 ms");
  CHECK(core::duration_text(duration<double>(0.9999996)) == "1 s");
  CHECK(core::duration_text(duration<double>(0.9999994)) == "999.999 ms");
  CHECK(core::duration_text(microseconds(35)) == "35 us");
  CHECK(core::duration_text(duration<double, std::micro>(0.4)) == "0 us");
  CHECK(core::duration_text(milliseconds(-1500)) == "-1.5 s");
}

TEST_CASE("num and join: the one copy of each") {
  CHECK(num(0) == "0");
  CHECK(num(18446744073709551615ull) == "18446744073709551615");
  const std::vector<int> three{1, 2, 3};
  const auto decimal = [](int v) { return std::to_string(v); };
  CHECK(join(three, ", ", decimal) == "1, 2, 3");
  CHECK(join(std::vector<int>{}, ", ", decimal).empty());
  CHECK(join(std::vector<std::string>{"", "b"}, ",", [](const std::string& s) { return s; }) ==
        ",b");
}

TEST_CASE("name_of and value_of read one table both ways") {
  enum class Colour { kRed, kBlue, kGreen };
  static constexpr Named<Colour> kColours[] = {{Colour::kRed, "red"}, {Colour::kBlue, "blue"}};
  CHECK(name_of(Colour::kBlue, kColours) == "blue");
  CHECK(name_of(Colour::kGreen, kColours) == "?");
  CHECK(name_of(Colour::kGreen, kColours, "colour") == "colour");
  CHECK(value_of("red", kColours) == Colour::kRed);
  CHECK_FALSE(value_of("green", kColours).has_value());
}

// parse_seconds reads what std::from_chars read before the release build's GCC 10 (which has
// no floating-point from_chars): the same numbers taken, the same text refused.
TEST_CASE("parse_seconds takes plain decimal seconds and refuses everything else") {
  struct Case {
    std::string text;
    long long ms;  // -1: refused
  };
  const Case cases[] = {
      {"1", 1000},    {"0.25", 250},   {".5", 500},     {"1.", 1000},   {"2e1", 20000},
      {"2E-1", 200},  {"-0", 0},       {"0", 0},        {"86400", 86400000},
      {"", -1},       {"-1", -1},      {"86401", -1},   {"inf", -1},    {"nan", -1},
      {"0x10", -1},   {" 1", -1},      {"1 ", -1},      {"+1", -1},     {"1e", -1},
      {".", -1},      {"1,5", -1},     {"1e999", -1},   {"--1", -1},    {"1.2.3", -1},
  };
  for (const Case& c : cases) {
    INFO("'" << c.text << "'");
    if (c.ms < 0) {
      CHECK_THROWS_AS(parse_seconds("X", c.text, 86400), Error);
    } else {
      CHECK(parse_seconds("X", c.text, 86400).count() == c.ms);
    }
  }
}

TEST_CASE("signal_text names the standard signals and numbers the rest") {
  CHECK(signal_text(SIGTERM) == "SIGTERM");
  CHECK(signal_text(SIGKILL) == "SIGKILL");
  CHECK(signal_text(SIGSTKFLT) == "SIGSTKFLT");
  CHECK(signal_text(SIGSYS) == "SIGSYS");
  CHECK(signal_text(SIGRTMIN + 2) == "signal " + std::to_string(SIGRTMIN + 2));
  CHECK(signal_text(0) == "signal 0");
  CHECK(signal_text(-3) == "signal -3");
}
