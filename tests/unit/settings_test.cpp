// The table of what is read (contract/settings.hpp): its readers and the rules env-table's
// Markdown and the docs tested against it depend on.
#include "contract/settings.hpp"

#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch;
using namespace dtlaunch::contract;
using dtlaunch::core::EnvMap;

TEST_CASE("settings: one declaration per variable and owner, each printable in a table row") {
  std::set<std::pair<std::string_view, Owner>> seen;
  for (const Setting* s : read_settings()) {
    INFO(s->name);
    CHECK(seen.insert({s->name, s->owner}).second);
    CHECK(!s->fallback.empty());
    CHECK(!s->doc.empty());
    // A '|' or a newline would split env-table's Markdown row.
    for (std::string_view text : {s->name, s->fallback, s->doc})
      CHECK(text.find_first_of("|\n") == std::string_view::npos);
    CHECK((s->parse == Setting::Parse::kNumber) == (s->max > 0));
  }
}

TEST_CASE("settings: an empty value is unset, except where empty means something") {
  const EnvMap env{{"DTLAUNCH_PORT_RANGE", ""}, {"CUDA_VISIBLE_DEVICES", ""}};
  CHECK_FALSE(contract::read_text(env, contract::setting::kPortRange));
  CHECK(contract::read_text(env, contract::setting::kCudaVisibleDevices) == "");
  CHECK_FALSE(contract::read_text(EnvMap{}, contract::setting::kCudaVisibleDevices));
  CHECK(contract::read_text(EnvMap{{"DTLAUNCH_CPU_BIND", "numa"}}, contract::setting::kCpuBind) ==
        "numa");
}

TEST_CASE("settings: numbers and switches are parsed by the declaration, and refused in one line") {
  CHECK(read_number(EnvMap{{"DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", "86400"}},
                    contract::setting::kHeartbeatTimeout) == 86400u);
  CHECK_FALSE(read_number(EnvMap{{"DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", ""}},
                          contract::setting::kHeartbeatTimeout));
  CHECK(read_switch(EnvMap{}, contract::setting::kShm, true));
  CHECK_FALSE(read_switch(EnvMap{{"DTLAUNCH_DDP_SHM", "0"}}, contract::setting::kShm, true));
  CHECK(read_switch(EnvMap{{"DTLAUNCH_DDP_CHECK", "1"}}, contract::setting::kCheck, false));

  for (const char* bad : {"86401", "-1", "+5", " 5", "5s", "0x10"})
    CHECK(setting_problem(contract::setting::kHeartbeatTimeout, bad) ==
          std::string("DTLAUNCH_DDP_HEARTBEAT_TIMEOUT='") + bad +
              "' is not an integer in 0..86400");
  CHECK(setting_problem(contract::setting::kShm, "yes") == "DTLAUNCH_DDP_SHM='yes' must be 0 or 1");
  CHECK(setting_problem(contract::setting::kShm, "1").empty());
  CHECK(setting_problem(contract::setting::kTraceDir, "\x1b[2J")
            .empty());  // text is checked where used
  REQUIRE_THROWS_WITH(
      read_switch(EnvMap{{"DTLAUNCH_DDP_TIMELINE", "2"}}, contract::setting::kTimeline, false),
      "DTLAUNCH_DDP_TIMELINE='2' must be 0 or 1");
}

TEST_CASE("settings: a refused value is quoted through excerpt, never raw") {
  // An escape sequence is shown escaped, and 100 KB are cut to a line.
  CHECK(setting_problem(contract::setting::kShm, "1\x1b[2J") ==
        "DTLAUNCH_DDP_SHM='1\\x1b[2J' must be 0 or 1");
  const std::string huge(100'000, '7');
  const std::string problem = setting_problem(contract::setting::kTraceEntries, huge);
  CHECK(problem.size() < 200);
  CHECK(problem.find("(100000 bytes)") != std::string::npos);
  try {
    (void)read_number(EnvMap{{"DTLAUNCH_DDP_REPORT_GRACE_MS", huge}},
                      contract::setting::kReportGraceMs);
    FAIL("a 100 KB number was accepted");
  } catch (const core::Error& e) {
    CHECK(e.exit_status() == 2);
    CHECK(std::string(e.what()).size() < 200);
  }
}

TEST_CASE("settings: every declaration of settings.hpp is in the list env-table prints") {
  std::ifstream header(SETTINGS_HEADER);
  REQUIRE(header);
  std::set<std::string> declared;
  const std::string prefix = "inline constexpr Setting k";
  for (std::string line; std::getline(header, line);)
    if (line.starts_with(prefix))
      declared.insert(line.substr(prefix.size() - 1,
                                  line.find_first_of(" =", prefix.size()) - (prefix.size() - 1)));
  // Each declaration is one Setting object; the list holds pointers to them, each once.
  std::set<const Setting*> listed(read_settings().begin(), read_settings().end());
  CHECK(listed.size() == read_settings().size());
  CHECK(declared.size() == read_settings().size());
  CHECK(declared.contains("kHeartbeatTimeout"));
}
