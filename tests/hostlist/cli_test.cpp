// Blackbox: `dtlaunch hostnames` and `dtlaunch hostlist` as processes, against scontrol.
// DTLAUNCH_BIN is set by CMake to the built binary.
#include <cstdlib>
#include <string>
#include <vector>

#include "dtlaunch_catch.hpp"
#include "scontrol.hpp"

namespace dtlaunch::hostlist::test {
namespace {

std::string binary() {
  const char* bin = std::getenv("DTLAUNCH_BIN");
  REQUIRE(bin != nullptr);
  return bin;
}

}  // namespace

TEST_CASE("dtlaunch hostnames prints what scontrol show hostnames prints", "[hostlist][cli]") {
  const Scontrol scontrol;
  for (std::string_view expr :
       {"gpu[001-004,010]", "n[9-11],n[009-11]", "a[1-2]b[3-4]c[5-6]", "a1 a2\ta3,,a4", "a[1, 2]",
        "n[1-3],n[2-4]", "1[2-3]", "a\r1,a2", "n[1-65536]", "",
        // Verbatim, not through CLI11, which reads "[...]" as a vector and "-n1" as an option.
        "[1-3]", "[1-2],[5-6]", "-n1"}) {
    INFO(printable(expr));
    const SlurmAnswer slurm = scontrol.hostnames(expr);
    REQUIRE(slurm.valid);
    const ProcessResult ours = run_process({binary(), "hostnames", std::string(expr)});
    CHECK(ours.exit_code == 0);
    CHECK(ours.err.empty());
    CHECK(ours.out == slurm.out);
  }
}

TEST_CASE("dtlaunch hostnames follows current Slurm for suffixes and newlines", "[hostlist][cli]") {
  const ProcessResult r = run_process({binary(), "hostnames", "gpu[01-02]-ib", "a[1-2]\nb3", "x"});
  CHECK(r.exit_code == 0);
  CHECK(r.out == "gpu01-ib\ngpu02-ib\na1\na2\nb3\nx\n");
}

TEST_CASE("dtlaunch hostnames refuses with one line and exit status 2", "[hostlist][cli]") {
  const Scontrol scontrol;
  for (std::string_view expr : {"n[1-3", "n[5-3]", "n[1-65537]", "n[99999999999999999999]",
                                "n[18446744073709551614-18446744073709551615]", "n[1x2]", "[a,b]",
                                "[]"}) {
    INFO(printable(expr));
    const ProcessResult ours = run_process({binary(), "hostnames", "ok[1-2]", std::string(expr)});
    CHECK(ours.exit_code == 2);
    CHECK(ours.out.empty());
    REQUIRE_FALSE(ours.err.empty());
    CHECK(ours.err.rfind("dtlaunch: ", 0) == 0);
    CHECK(ours.err.find('\n') == ours.err.size() - 1);
    CHECK(ours.err.find(std::string(expr)) != std::string::npos);
  }
}

TEST_CASE("dtlaunch hostlist prints what scontrol show hostlist prints", "[hostlist][cli]") {
  const Scontrol scontrol;
  const std::vector<std::vector<std::string>> cases = {
      {"a1", "a2", "a3"},
      {"a1,a2,a3"},
      {"n8", "n9", "n010", "login1", "login2"},
      {"a3,a2", "a1"},
      {"gpu001,gpu002", "gpu004"},
      {"[1-3]"},
      {"[1-2]", "[5-6]"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const std::string& a : args) joined += (joined.empty() ? "" : ",") + a;
    INFO(joined);
    const SlurmAnswer slurm = scontrol.hostlist(joined);
    REQUIRE(slurm.valid);
    std::vector<std::string> argv = {binary(), "hostlist"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult ours = run_process(argv);
    CHECK(ours.exit_code == 0);
    CHECK(ours.out == slurm.ranged + "\n");
  }
}

}  // namespace dtlaunch::hostlist::test
