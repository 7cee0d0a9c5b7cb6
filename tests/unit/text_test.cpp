#include "core/text.hpp"

#include <string>

#include "core/env_map.hpp"
#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch;

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

TEST_CASE("first_line and seconds_text, as the DDP runtime's messages use them") {
  CHECK(first_line("one\ntwo") == "one");
  CHECK(first_line("one") == "one");
  CHECK(first_line("") == "");
  using std::chrono::milliseconds;
  CHECK(seconds_text(milliseconds(2000)) == "2s");
  CHECK(seconds_text(milliseconds(1500)) == "1.5s");
  CHECK(seconds_text(milliseconds(250)) == "0.25s");
  CHECK(seconds_text(milliseconds(300001)) == "300.001s");
  CHECK(seconds_text(milliseconds(0)) == "0s");
}
