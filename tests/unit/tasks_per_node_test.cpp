#include "launch/tasks_per_node.hpp"

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using dtlaunch::core::Error;
using dtlaunch::launch::parse_tasks_per_node;
using V = std::vector<std::uint32_t>;

TEST_CASE("tasks per node: Slurm's compressed syntax expands per node") {
  const std::pair<const char*, V> cases[] = {
      {"8", {8}},
      {"8(x2)", {8, 8}},
      {"8(x2),4", {8, 8, 4}},
      {"2,1", {2, 1}},
      {"1(x3),2,3(x2)", {1, 1, 1, 2, 3, 3}},
      {"16", {16}},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK(parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", text) == expected);
  }
}

TEST_CASE("tasks per node: malformed values name the variable and the value") {
  const char* bad[] = {"",   ",",  "8,",     ",8",         "8(x)",      "8(x0)",
                       "0",  "-1", "8(2)",   "8(x2",       "8x2",       "a",
                       "8 ", " 8", "8(x2),", "4294967296", "8(x2)(x2)", "8(y2)"};
  for (const char* text : bad) {
    INFO("'" << text << "'");
    try {
      parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", text);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.exit_status() == 2);
      std::string msg = e.what();
      CHECK(msg.rfind("SLURM_STEP_TASKS_PER_NODE='" + std::string(text) + "'", 0) == 0);
      CHECK(msg.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("tasks per node: a repeat count past the node bound is refused, not allocated") {
  CHECK_THROWS_AS(parse_tasks_per_node("V", "1(x4294967295)", 1000), Error);
  CHECK(parse_tasks_per_node("V", "1(x1000)", 1000).size() == 1000);
}
