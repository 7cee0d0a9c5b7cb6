// release_code_pages(), which dtlaunch --watch calls once its program runs, on this very process:
// its code must go on running, and its resident set must shrink.
#include <fstream>
#include <regex>
#include <string>

#include "dtlaunch_catch.hpp"
#include "proc/footprint.hpp"

namespace {

long resident_kb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

}  // namespace

TEST_CASE("release_code_pages: the code runs on and its pages are handed back", "[proc]") {
  // Code of this binary, libstdc++ and libc, run once so that its pages are resident.
  const std::regex word("[a-z]+-[0-9]+");
  CHECK(std::regex_match("node-17", word));
  const long file_before = resident_kb("RssFile");
  REQUIRE(file_before > 0);

  const std::size_t released = dtlaunch::proc::release_code_pages();
  const long file_after = resident_kb("RssFile");
  INFO("RssFile " << file_before << " kB -> " << file_after << " kB; " << released / 1024
                  << " kB of code mappings released");
  CHECK(released > 0);
  CHECK(file_after < file_before);
  // The same code again, from pages mapped anew: the same results.
  CHECK(std::regex_match("node-17", word));
  CHECK_FALSE(std::regex_match("node17", word));
  CHECK(std::to_string(12345) == "12345");
}
