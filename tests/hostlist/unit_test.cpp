// Unit tests of the hostlist library: Slurm's rules as tables of expression -> hosts, the
// deliberate differences from Slurm 22.05 as named tests, the bounds, the error messages, and the
// replay of inputs the fuzzer once found.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dtlaunch_catch.hpp"
#include "hostlist/hostlist.hpp"
#include "properties.hpp"

namespace dtlaunch::hostlist {
namespace {

using Hosts = std::vector<std::string>;

struct Case {
  std::string_view expr;
  Hosts hosts;
};

Reason refusal(std::string_view expr, Syntax syntax = Syntax::kCurrent) {
  try {
    expand(expr, syntax);
  } catch (const ParseError& e) {
    return e.reason();
  }
  FAIL("accepted: " << expr);
  return Reason::kNulByte;
}

}  // namespace

TEST_CASE("expansion follows Slurm's rules", "[hostlist]") {
  const std::vector<Case> cases = {
      {"gpu[001-004,010]", {"gpu001", "gpu002", "gpu003", "gpu004", "gpu010"}},
      {"", {}},
      {",,,", {}},
      {" \t", {}},
      {",a1,", {"a1"}},
      {"a1,,a2", {"a1", "a2"}},
      {"a1 a2\ta3", {"a1", "a2", "a3"}},
      {"a1,a1", {"a1", "a1"}},
      {"a3,a1,a2", {"a3", "a1", "a2"}},
      {"a[1-2,1-2]", {"a1", "a2", "a1", "a2"}},
      {"n[10-12,1-3]", {"n10", "n11", "n12", "n1", "n2", "n3"}},
      // Width: the length of the low bound as written.
      {"n[9-11]", {"n9", "n10", "n11"}},
      {"n[09-11]", {"n09", "n10", "n11"}},
      {"n[009-11]", {"n009", "n010", "n011"}},
      {"n[001-3]", {"n001", "n002", "n003"}},
      {"n[01-1]", {"n01"}},
      {"n[98-101]", {"n98", "n99", "n100", "n101"}},
      {"n[999-1000]", {"n999", "n1000"}},
      {"n[+1-3]", {"n01", "n02", "n03"}},
      {"a[1, 2]", {"a1", "a02"}},
      {"a[ 1-2]", {"a01", "a02"}},
      {"n[1a-3]", {"n01", "n02", "n03"}},
      {"n[1.5-3]", {"n001", "n002", "n003"}},
      {"n[1-]", {"n1"}},
      {"n[1-+3]", {"n1", "n2", "n3"}},
      {"n[0- -0]", {"n0"}},
      {"[1-3]", {"1", "2", "3"}},
      {"1[2-3]", {"12", "13"}},
      // Literal names are kept as written.
      {"n007", {"n007"}},
      {"]", {"]"}},
      {"n1-3]", {"n1-3]"}},
      {"@group", {"@group"}},
      {"n\xc5\x93ud", {"n\xc5\x93ud"}},
      {"a1\r", {"a1\r"}},
      {"n18446744073709551615", {"n18446744073709551615"}},
      // Several groups: loops nest from the group left of the final one leftwards, final last.
      {"a[1-2]b[3-4]", {"a1b3", "a1b4", "a2b3", "a2b4"}},
      {"a[1-2]b[3-4]c[5-6]",
       {"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"}},
      {"n[1-3][4-5]", {"n14", "n15", "n24", "n25", "n34", "n35"}},
      {"n[1-3]&n[2-4]",
       {"n1&n2", "n1&n3", "n1&n4", "n2&n2", "n2&n3", "n2&n4", "n3&n2", "n3&n3", "n3&n4"}},
      {"a[1b[2-3]", {"a[1b2", "a[1b3"}},
      {"n[[1-3]", {"n[1", "n[2", "n[3"}},
      {"a[1]b[c[2]", {"a[1]b[c2"}},
      {"a[1]-3]b[1]", {"a01b1", "a02b1", "a03b1"}},
      {"a[1, 2]x", {"a1x", "a02x"}},
      // Current Slurm: a suffix follows every name, newline separates.
      {"gpu[01-04]-ib", {"gpu01-ib", "gpu02-ib", "gpu03-ib", "gpu04-ib"}},
      {"gpu[001-004,010],login-[1,2]-ib",
       {"gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "login-1-ib", "login-2-ib"}},
      {"n[1]a[2]b", {"n1a2b"}},
      {"n[1-2]]", {"n1]", "n2]"}},
      {"a[1-2]\nb[3-4]", {"a1", "a2", "b3", "b4"}},
      // Slurm prints a joined range with its first prefix, and compares prefixes across blanks.
      {"a\r1,a2,a3", {"a\r1", "a\r2", "a\r3"}},
      {"a1,a\r2,a3", {"a1", "a2", "a3"}},
      {"a1 2", {"a1", "2"}},
  };
  for (const Case& c : cases) {
    INFO("expression: " << c.expr);
    CHECK(expand(c.expr) == c.hosts);
    CHECK(count(c.expr) == c.hosts.size());
  }
}

TEST_CASE("Slurm 22.05's syntax: newline inside a name and no suffix", "[hostlist]") {
  CHECK(expand("a[1-2]\nb[3-4]", Syntax::kSlurm2205) ==
        Hosts{"a1\nb3", "a1\nb4", "a2\nb3", "a2\nb4"});
  CHECK(refusal("n[1-3].ib", Syntax::kSlurm2205) == Reason::kSuffix);
  CHECK(refusal("n[1-3]]", Syntax::kSlurm2205) == Reason::kSuffix);
}

TEST_CASE("invalid expressions are refused as a whole", "[hostlist]") {
  const std::vector<std::pair<std::string_view, Reason>> cases = {
      {"n[]", Reason::kBadRange},
      {"n[,]", Reason::kBadRange},
      {"n[1,]", Reason::kBadRange},
      {"n[,1]", Reason::kBadRange},
      {"[]", Reason::kBadRange},
      {"n[0x10]", Reason::kBadRange},
      {"n[1x3]", Reason::kBadRange},
      {"n[1--3]", Reason::kBadRange},
      {"n[-1]", Reason::kBadRange},
      {"n[1-3-5]", Reason::kBadRange},
      {"n[5-3]", Reason::kBadRange},
      {"n[1a]", Reason::kBadRange},
      {"n[1e3]", Reason::kBadRange},
      {"n[1-2 ]", Reason::kBadRange},
      {"n[1a-]", Reason::kBadRange},
      {"n[\xd9\xa3]", Reason::kBadRange},
      {"n[1-65537]", Reason::kRangeTooLarge},
      {"n[0-65536]", Reason::kRangeTooLarge},
      {"a[0-40000,0-40000]b[1]", Reason::kTooManyPrefixes},
      {"a[1-2]b[q]c[1-2]", Reason::kBadRange},
      {"ok1,n[5-3],ok2", Reason::kBadRange},
  };
  for (const auto& [expr, reason] : cases) {
    INFO("expression: " << expr);
    CHECK(refusal(expr) == reason);
  }
  CHECK(count("n[1-65536]") == 65536);
  CHECK(count("n[1-40000,1-40000]") == 80000);
  CHECK(count("a[0-65535]b[1]") == 65536);
}

// Each deliberate difference from Slurm 22.05 (docs/hostlist.md), with the exact input.
TEST_CASE("difference: an unclosed bracket is an error and invents no host",
          "[hostlist][differs]") {
  for (std::string_view expr : {"n[1-3", "n[", "bad[", "[1-3", "[", "n[1-2][", "a]b[1,2"}) {
    INFO(expr);
    CHECK(refusal(expr) == Reason::kUnclosedBracket);
    CHECK(refusal(expr, Syntax::kSlurm2205) == Reason::kUnclosedBracket);
  }
}

TEST_CASE("difference: numbers above 2^64-1 are errors and are not clamped",
          "[hostlist][differs]") {
  for (std::string_view expr :
       {"n[99999999999999999999]", "n[18446744073709551616]", "n99999999999999999999",
        "n[1-18446744073709551616]", "n[1]99999999999999999999"}) {
    INFO(expr);
    CHECK(refusal(expr) == Reason::kNumberTooLarge);
  }
  CHECK(expand("n[18446744073709551615]") == Hosts{"n18446744073709551615"});
}

TEST_CASE("difference: a run of hosts ending at 2^64-1 is an error and not a crash",
          "[hostlist][differs]") {
  CHECK(refusal("n[18446744073709551614-18446744073709551615]") == Reason::kMaxNumberRange);
  CHECK(refusal("n18446744073709551614,n18446744073709551615") == Reason::kMaxNumberRange);
  CHECK(refusal("n[18446744073709551614],n[18446744073709551615]") == Reason::kMaxNumberRange);
  CHECK(refusal("n18446744073709551615,n0") == Reason::kNumberWraps);
  CHECK(refusal("n[0-18446744073709551615]") == Reason::kRangeTooLarge);
  CHECK(refusal("n[18446744073709551615]a[1]") == Reason::kMaxNumberRange);
  CHECK(expand("n[18446744073709551614]a[1]") == Hosts{"n18446744073709551614a1"});
  CHECK(expand("n18446744073709551615,m0") == Hosts{"n18446744073709551615", "m0"});
}

TEST_CASE("difference: errors in groups Slurm skips are errors", "[hostlist][differs]") {
  CHECK(refusal("a[q]b[1-2]c[1-2]") == Reason::kIgnoredGroupError);
  CHECK(refusal("x1,a[q]b[1]c[1]") == Reason::kIgnoredGroupError);
  CHECK(refusal("a[0-40000,0-40000]b[1-2]c[1]") == Reason::kIgnoredGroupError);
}

TEST_CASE("difference: a NUL byte is an error", "[hostlist][differs]") {
  CHECK(refusal(std::string_view("n1\0n2", 5)) == Reason::kNulByte);
}

TEST_CASE("bounds: too many hosts or bytes is an error before anything is built",
          "[hostlist][bounds]") {
  CHECK(refusal("a[1-65536]b[1-65536]") == Reason::kTooManyHosts);
  CHECK(refusal("a[1-65536]b[1-65536]c[1-65536]d[1-65536]") == Reason::kTooManyHosts);
  std::string many;
  for (int i = 0; i < 65; ++i) many += "n[1-65536],";
  CHECK(refusal(many) == Reason::kTooManyHosts);
  // 64 Ki hosts of a 5000-character name: over kMaxChars bytes.
  const std::string long_name = std::string(5000, 'a') + "[1-65536]";
  CHECK(refusal(long_name) == Reason::kTooManyHosts);
  CHECK(count("a[1-64]b[1-65536]") == 64 * 65536);
}

TEST_CASE("error messages are one line that quotes the expression and names the character",
          "[hostlist]") {
  try {
    expand("gpu[1-4],n[1-x]");
    FAIL("accepted");
  } catch (const ParseError& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);
    CHECK(m.find("\"gpu[1-4],n[1-x]\"") != std::string::npos);
    CHECK(m.find("at character 14 (\"x\")") != std::string::npos);
    CHECK(e.offset() == 13);
    CHECK(e.code() == core::ExitCode::kBadInput);
  }
  try {
    expand("a\nb[1-3");
    FAIL("accepted");
  } catch (const ParseError& e) {
    CHECK(std::string(e.what()).find("\"a\\nb[1-3\"") != std::string::npos);
    CHECK(std::string(e.what()).find("at character 4 (\"[\")") != std::string::npos);
  }
  try {  // a long expression is shown around the offending character
    expand(std::string(500, 'a') + ",n[1-" + std::string(500, 'b'));
    FAIL("accepted");
  } catch (const ParseError& e) {
    const std::string m = e.what();
    CHECK(m.size() < 250);
    CHECK(m.find("(1005 bytes)") != std::string::npos);
  }
}

TEST_CASE("for_each_host gives expand's hosts and nothing on error", "[hostlist]") {
  Hosts seen;
  for_each_host("n[1-3],m[09-10]", [&](std::string_view h) { seen.emplace_back(h); });
  CHECK(seen == expand("n[1-3],m[09-10]"));
  seen.clear();
  CHECK_THROWS_AS(for_each_host("n[1-3],m[", [&](std::string_view h) { seen.emplace_back(h); }),
                  ParseError);
  CHECK(seen.empty());
}

TEST_CASE("compress is scontrol show hostlist", "[hostlist]") {
  const std::vector<std::pair<Hosts, std::string_view>> cases = {
      {{"a1", "a2", "a3"}, "a[1-3]"},
      {{"a3", "a2", "a1"}, "a[3,2,1]"},
      {{"a1", "a1"}, "a[1,1]"},
      {{"a9", "a10", "a11"}, "a[9-11]"},
      {{"a09", "a10"}, "a[09-10]"},
      {{"n8", "n9", "n010"}, "n[8-9,010]"},
      {{"a1", "a01", "a001"}, "a[1,01,001]"},
      {{"login1", "login2", "gpu1", "gpu2", "login3"}, "login[1-2],gpu[1-2],login3"},
      {{"a1", "b", "a2"}, "a1,b,a2"},
      {{"n0"}, "n0"},
      {{"12", "13"}, "[12-13]"},
      {{}, ""},
      {{"n18446744073709551615", "n0"}, ""},  // refused, see below
  };
  for (const auto& [hosts, ranged] : cases) {
    if (ranged.empty() && !hosts.empty()) continue;
    INFO(ranged);
    CHECK(compress(hosts) == ranged);
    CHECK(expand(ranged) == hosts);
  }
}

TEST_CASE("compress refuses names no expression can spell", "[hostlist]") {
  for (const char* name : {"a b", "a,b", "n[1]", "]", "a\r1", "", "n99999999999999999999"}) {
    INFO(name);
    try {
      compress({"ok1", name});
      FAIL("accepted");
    } catch (const ParseError& e) {
      CHECK(e.reason() == Reason::kNotWritable);
      CHECK(e.offset() == 1);
    }
  }
  CHECK_THROWS_AS(compress({"n18446744073709551615", "n0"}), ParseError);
  CHECK_THROWS_AS(compress({"n18446744073709551614", "n18446744073709551615"}), ParseError);
}

TEST_CASE("recompress keeps the ranges as written", "[hostlist]") {
  const std::vector<std::pair<std::string_view, std::string_view>> cases = {
      {"1[2-3]", "1[2-3]"},
      {"a[1-2]b[3-4]", "a1b[3-4],a2b[3-4]"},
      {"rack[1-2]_node[01-03]", "rack1_node[01-03],rack2_node[01-03]"},
      {"[1-3]", "[1-3]"},
      {"n[0]", "n0"},
      {"x]y1,x]y3", "x]y[1,3]"},
      {"n[1-3],n[4-5]", "n[1-5]"},
      {"a\r1,a2,a3", "a\r[1-3]"},
      {"gpu[01-02]-ib", "gpu01-ib,gpu02-ib"},
  };
  for (const auto& [expr, ranged] : cases) {
    INFO(expr);
    CHECK(recompress(expr) == ranged);
  }
}

TEST_CASE("inputs the fuzzer found still hold every property", "[hostlist][fuzz]") {
  int replayed = 0;
  for (const auto& dir : {std::filesystem::path(DTLAUNCH_HOSTLIST_REGRESSIONS)}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string input((std::istreambuf_iterator<char>(in)), {});
      INFO(entry.path().filename().string());
      CHECK(test::check_properties(input) == "");
      ++replayed;
    }
  }
  CHECK(replayed > 0);
}

}  // namespace dtlaunch::hostlist
