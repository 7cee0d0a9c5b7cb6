// Differential tests: dtlaunch's expand/recompress/compress against the real
// `scontrol show hostnames|hostlist` of Slurm 22.05 (Debian bookworm), in-process on our side.
// They use Syntax::kSlurm2205 (newline inside a name, no suffix) so that every difference is
// one of the deliberate refusals of docs/hostlist.md.
#include <cstdlib>
#include <optional>
#include <string>

#include "corpus.hpp"
#include "dtlaunch_catch.hpp"
#include "generator.hpp"
#include "hostlist/hostlist.hpp"
#include "scontrol.hpp"

namespace dtlaunch::hostlist::test {
namespace {

struct Ours {
  std::optional<std::vector<std::string>> hosts;  // empty when refused
  std::optional<Reason> reason;
  std::optional<ParseError> error;
  std::string message;
};

Ours expand_22(std::string_view expr) {
  Ours o;
  try {
    o.hosts = expand(expr, Syntax::kSlurm2205);
  } catch (const ParseError& e) {
    o.reason = e.reason();
    o.error = e;
    o.message = e.what();
  }
  return o;
}

std::string as_lines(const std::vector<std::string>& hosts) {
  std::string text;
  for (const std::string& h : hosts) text.append(h).push_back('\n');
  return text;
}

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

// The refusals of docs/hostlist.md that turn an expression 22.05 accepts into an error.
bool deliberate(std::string_view expr, const ParseError& e) {
  switch (e.reason()) {
    case Reason::kUnclosedBracket:
    case Reason::kNumberTooLarge:
    case Reason::kIgnoredGroupError:
    case Reason::kNumberWraps:
    case Reason::kMaxNumberRange:
      return true;
    case Reason::kRangeTooLarge: {  // n[0-18446744073709551615]: 22.05 counts 2^64 hosts as 0
      const std::size_t end = expr.find_first_of(",]", e.offset());
      const std::string_view item =
          expr.substr(e.offset(), end == std::string_view::npos ? end : end - e.offset());
      return item.find("18446744073709551615") != std::string_view::npos;
    }
    default:
      return false;
  }
}

}  // namespace

TEST_CASE("scontrol is there to compare with", "[hostlist][scontrol]") {
  REQUIRE(Scontrol().available());
}

TEST_CASE("hand-written expressions expand as scontrol show hostnames does",
          "[hostlist][scontrol]") {
  const Scontrol scontrol;
  int compared = 0;
  for (const CorpusEntry& entry : corpus()) {
    INFO("expression " << printable(entry.expr));
    const SlurmAnswer slurm = scontrol.hostnames(entry.expr);
    const Ours ours = expand_22(entry.expr);
    INFO("scontrol: valid=" << slurm.valid << " crashed=" << slurm.crashed << " stderr "
                            << printable(slurm.err) << "; dtlaunch: " << ours.message);
    if (entry.refused_by_us) {
      CHECK((slurm.valid || slurm.crashed));
      CHECK(ours.reason == entry.refused_by_us);
    } else if (slurm.valid) {
      REQUIRE(ours.hosts.has_value());
      CHECK(printable(as_lines(*ours.hosts)) == printable(slurm.out));
      ++compared;
    } else {
      CHECK_FALSE(slurm.crashed);
      CHECK_FALSE(ours.hosts.has_value());
    }
  }
  CHECK(compared > 90);
}

TEST_CASE("hand-written expressions compress as scontrol show hostlist does",
          "[hostlist][scontrol]") {
  const Scontrol scontrol;
  for (const CorpusEntry& entry : corpus()) {
    INFO("expression " << printable(entry.expr));
    const SlurmAnswer slurm = scontrol.hostlist(entry.expr);
    std::optional<std::string> ours;
    std::optional<Reason> reason;
    try {
      ours = recompress(entry.expr, Syntax::kSlurm2205);
    } catch (const ParseError& e) {
      reason = e.reason();
    }
    if (entry.refused_by_us) {
      CHECK(reason == entry.refused_by_us);
    } else if (slurm.valid) {
      REQUIRE(ours.has_value());
      CHECK(printable(*ours) == printable(slurm.ranged));
    } else {
      CHECK_FALSE(ours.has_value());
    }
  }
}

TEST_CASE("random expressions expand and compress as scontrol does", "[hostlist][scontrol]") {
  const std::uint64_t seed = env_number("DTLAUNCH_HOSTLIST_SEED", 20261129);
  const std::uint64_t cases = env_number("DTLAUNCH_HOSTLIST_CASES", 2000);
  Generator generator(seed);
  const Scontrol scontrol;
  int both_valid = 0;
  int both_invalid = 0;
  int refused = 0;
  for (std::uint64_t i = 0; i < cases; ++i) {
    const std::string expr = generator.expression();
    INFO("seed " << seed << " case " << i << ": expression " << printable(expr));
    const SlurmAnswer slurm = scontrol.hostnames(expr);
    const Ours ours = expand_22(expr);
    INFO("scontrol: valid=" << slurm.valid << " crashed=" << slurm.crashed << " stderr "
                            << printable(slurm.err) << "; dtlaunch: " << ours.message);
    if (ours.reason && (slurm.valid || slurm.crashed)) {
      REQUIRE(deliberate(expr, *ours.error));
      ++refused;
      continue;
    }
    if (!slurm.valid) {
      REQUIRE_FALSE(ours.hosts.has_value());
      ++both_invalid;
      continue;
    }
    REQUIRE(ours.hosts.has_value());
    REQUIRE(printable(as_lines(*ours.hosts)) == printable(slurm.out));
    const SlurmAnswer ranged = scontrol.hostlist(expr);
    REQUIRE(ranged.valid);
    REQUIRE(printable(recompress(expr, Syntax::kSlurm2205)) == printable(ranged.ranged));
    ++both_valid;
  }
  INFO("valid " << both_valid << ", invalid " << both_invalid << ", refused " << refused);
  // The generator must exercise both sides, or the comparison proves little.
  CHECK(both_valid > static_cast<int>(cases) / 3);
  CHECK(both_invalid > static_cast<int>(cases) / 20);
  CHECK(refused > 0);
}

TEST_CASE("random name lists compress as scontrol show hostlist does", "[hostlist][scontrol]") {
  const std::uint64_t seed = env_number("DTLAUNCH_HOSTLIST_SEED", 20261129);
  const std::uint64_t cases = env_number("DTLAUNCH_HOSTLIST_CASES", 2000) / 2;
  Generator generator(seed + 1);
  const Scontrol scontrol;
  for (std::uint64_t i = 0; i < cases; ++i) {
    const std::vector<std::string> names = generator.names();
    std::string joined;
    for (const std::string& n : names) joined += (joined.empty() ? "" : ",") + n;
    INFO("seed " << seed << " case " << i << ": names " << printable(joined));
    const SlurmAnswer slurm = scontrol.hostlist(joined);
    REQUIRE(slurm.valid);
    const std::string ours = compress(names);
    REQUIRE(ours == slurm.ranged);
    REQUIRE(expand(ours) == names);
  }
}

}  // namespace dtlaunch::hostlist::test
