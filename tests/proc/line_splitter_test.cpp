#include "proc/line_splitter.hpp"

#include <string>
#include <vector>

#include "dtlaunch_catch.hpp"

using dtlaunch::proc::LineSplitter;
using dtlaunch::proc::LineTail;

namespace {

std::vector<std::string> split(std::size_t max_line, const std::vector<std::string>& chunks,
                               bool finish = true) {
  std::vector<std::string> lines;
  LineSplitter splitter(max_line);
  auto keep = [&](std::string_view line) { lines.emplace_back(line); };
  for (const std::string& chunk : chunks) splitter.feed(chunk, keep);
  if (finish) splitter.finish(keep);
  return lines;
}

}  // namespace

TEST_CASE("LineSplitter cuts a stream into lines", "[unit]") {
  using V = std::vector<std::string>;
  struct Case {
    const char* name;
    std::size_t max_line;
    V chunks;
    V lines;
  };
  const std::vector<Case> cases = {
      {"nothing", 8, {}, {}},
      {"one line", 8, {"abc\n"}, {"abc"}},
      {"two lines in one chunk", 8, {"a\nb\n"}, {"a", "b"}},
      {"a line across chunks", 8, {"ab", "c", "d\n"}, {"abcd"}},
      {"empty lines are kept", 8, {"\n\na\n"}, {"", "", "a"}},
      {"partial last line flushed by finish", 8, {"a\nbc"}, {"a", "bc"}},
      {"a long line is cut at max_line", 4, {"abcdefghij\n"}, {"abcd", "efgh", "ij"}},
      {"a line of exactly max_line is one line", 4, {"abcd\n"}, {"abcd"}},
      {"exactly max_line across chunks: no extra empty line",
       4,
       {"ab", "cd", "\nx\n"},
       {"abcd", "x"}},
      {"cut across chunks", 4, {"abc", "def", "g\n"}, {"abcd", "efg"}},
      {"carriage returns are data", 8, {"a\rb\n"}, {"a\rb"}},
      {"a NUL byte is data", 8, {std::string("a\0b\n", 4)}, {std::string("a\0b", 3)}},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      CHECK(split(c.max_line, c.chunks) == c.lines);
    }
  }
}

TEST_CASE("LineSplitter keeps an unterminated line until finish", "[unit]") {
  CHECK(split(8, {"a\nbc"}, false) == std::vector<std::string>{"a"});
  LineSplitter s(8);
  s.feed("xy", [](std::string_view) { FAIL("no complete line yet"); });
  CHECK(s.has_pending());
}

TEST_CASE("LineTail keeps the last lines, oldest first", "[unit]") {
  struct Case {
    std::size_t capacity;
    int pushed;
    std::vector<std::string> expected;
  };
  for (const Case& c : {Case{3, 0, {}}, Case{3, 2, {"0", "1"}}, Case{3, 5, {"2", "3", "4"}},
                        Case{0, 4, {}}, Case{1, 4, {"3"}}}) {
    LineTail tail(c.capacity);
    for (int i = 0; i < c.pushed; ++i) tail.push(std::to_string(i));
    CHECK(tail.lines() == c.expected);
  }
}
