// `dtlaunch trace`'s reader and verdict (lib/trace), on files written here in the runtime's format
// (tests/ddp checks the runtime's own files against the same reader).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "test_support.hpp"
#include "trace/record.hpp"
#include "trace/timeline.hpp"
#include "trace/trace_dir.hpp"
#include "trace/verdict.hpp"

using namespace dtlaunch;
using namespace dtlaunch::trace;

namespace {

struct FakeEntry {
  uint64_t seq;
  int64_t enqueue_us, end_us;
  const char* state = "completed";
  int numel = 4;
};

std::string rank_file(int rank, int world, const std::vector<FakeEntry>& entries,
                      const std::string& kind = "exit", const std::string& run = "run-1",
                      int64_t offset = 0) {
  std::string out = "{\"format\": \"dtlaunch-flight-record\", \"version\": 2, \"run_id\": \"" +
                    run + "\", \"attempt\": 0, \"rank\": " + std::to_string(rank) +
                    ", \"world_size\": " + std::to_string(world) +
                    ", \"local_rank\": " + std::to_string(rank) + ", \"host\": \"node" +
                    std::to_string(rank / 2) + "\", \"kind\": \"" + kind +
                    "\", \"reason\": \"why \\\"quoted\\\" \\udcff\", \"dumped_at_us\": 9000000000, "
                    "\"clock_offset_us\": " +
                    std::to_string(offset) + ", \"clock_error_us\": 40, \"collectives_started\": " +
                    std::to_string(entries.empty() ? 0 : entries.back().seq) +
                    ", \"entries_capacity\": 2000,\n \"entries\": [";
  for (size_t i = 0; i < entries.size(); ++i) {
    const FakeEntry& e = entries[i];
    out +=
        std::string(i ? ",\n" : "\n") + "  {\"seq\": " + std::to_string(e.seq) +
        ", \"op\": \"all_reduce\", \"dtype\": \"float32\", \"numel\": " + std::to_string(e.numel) +
        ", \"shape\": [" + std::to_string(e.numel) +
        "], \"root\": -1, \"enqueue_us\": " + std::to_string(e.enqueue_us) +
        ", \"start_us\": " + std::to_string(e.enqueue_us) +
        ", \"end_us\": " + std::to_string(e.end_us) + ", \"state\": \"" + e.state + "\"}";
  }
  return out + "\n ]}\n";
}

RankFile parsed(const std::string& text) {
  std::string error;
  auto f = parse_rank_file(text, &error);
  INFO(error);
  REQUIRE(f);
  return *f;
}

// A job of `world` ranks and `steps` collectives 10 ms apart; each rank enters at a jitter of up
// to `jitter_us`, `late_rank` (if any) `late_us` later; every rank ends when the last entered.
std::vector<std::string> job(int world, int steps, uint32_t seed, int64_t jitter_us,
                             int late_rank = -1, int64_t late_us = 0) {
  std::mt19937 rng(seed);
  std::vector<std::vector<FakeEntry>> per(static_cast<size_t>(world));
  int64_t t = 1'000'000'000;
  for (int s = 1; s <= steps; ++s) {
    std::vector<int64_t> enq(static_cast<size_t>(world));
    int64_t last = 0;
    for (int r = 0; r < world; ++r) {
      // Heavy-tailed noise, as a loaded machine gives: now and then one rank is 5 ms late.
      int64_t j = static_cast<int64_t>(rng() % static_cast<uint32_t>(jitter_us + 1));
      if (rng() % 50 == 0) j += 5000;
      enq[static_cast<size_t>(r)] = t + j + (r == late_rank ? late_us : 0);
      last = std::max(last, enq[static_cast<size_t>(r)]);
    }
    for (int r = 0; r < world; ++r)
      per[static_cast<size_t>(r)].push_back(
          {static_cast<uint64_t>(s), enq[static_cast<size_t>(r)], last + 300});
    t = last + 10'000;
  }
  std::vector<std::string> files;
  for (int r = 0; r < world; ++r) files.push_back(rank_file(r, world, per[static_cast<size_t>(r)]));
  return files;
}

Findings merge(const std::vector<std::string>& files, int world) {
  Merger m("run-1", 0, world);
  for (size_t r = 0; r < files.size(); ++r)
    if (!files[r].empty()) m.add("f" + std::to_string(r), parsed(files[r]));
  return m.finish();
}

void write_file(const dtlaunch_test::TempDir& dir, const std::string& name,
                const std::string& text) {
  std::ofstream(dir / name) << text;
}

}  // namespace

TEST_CASE("trace: a rank file parses, escapes and all") {
  const RankFile f = parsed(rank_file(1, 4, {{1, 100, 200}, {2, 300, 0, "started"}}));
  CHECK(f.header.rank == 1);
  CHECK(f.header.world_size == 4);
  CHECK(f.header.host == "node0");
  CHECK(f.header.reason == "why \"quoted\" \xff");
  CHECK(f.header.clock_error_us == 40);
  REQUIRE(f.entries.size() == 2);
  CHECK(f.entries[1].state == EntryState::kStarted);
  CHECK(signature_text(f.entries[0]) == "all_reduce (float32, [4])");
}

TEST_CASE("trace: a file cut at any byte, or with any byte changed, is an error, never a crash") {
  const std::string text = rank_file(0, 2, {{1, 100, 200}, {2, 300, 400, "failed"}});
  for (size_t n = 0; n + 1 < text.size(); ++n) {
    std::string error;
    // The last byte is a newline: the record is complete without it.
    const auto f = parse_rank_file(std::string_view(text).substr(0, n), &error);
    INFO("cut at " << n);
    CHECK(!f);
    CHECK(!error.empty());
  }
  for (size_t i = 0; i < text.size(); ++i) {
    for (char c : {'x', '"', '{', ']', '\0', '9', '-'}) {
      std::string changed = text;
      changed[i] = c;
      std::string error;
      const auto f = parse_rank_file(changed, &error);  // either parses or says why
      CHECK((f.has_value() || !error.empty()));
    }
  }
  std::string error;
  CHECK(!parse_rank_file(std::string(100000, '['), &error));
  CHECK(!parse_rank_file("{\"format\": \"something else\", \"entries\": []}", &error));
  CHECK(error == "byte 27: not a dtlaunch flight record");
}

TEST_CASE(
    "trace: a skipped collective names the collective, the rank that never entered and the "
    "waiters") {
  const std::vector<FakeEntry> waiter = {{1, 100, 200}, {2, 300, 400}, {3, 500, 0, "failed"}};
  const std::vector<FakeEntry> skipper = {{1, 100, 200}, {2, 300, 400}};
  const Findings v = merge({rank_file(0, 3, waiter, "error"), rank_file(1, 3, skipper),
                           rank_file(2, 3, waiter, "error")},
                          3);
  CHECK(v.divergent_seq == 3);
  CHECK(v.never_entered == std::vector<int>{1});
  CHECK(v.failed_in == std::vector<int>{0, 2});
  CHECK(!v.healthy());
  const std::string text = render_text(v, "d");
  INFO(text);
  CHECK(text.find("first divergence: all_reduce #3 (float32, [4]): rank 1 (node0, local rank 1) "
                  "never entered it (last entered all_reduce #2 (float32, [4]), completed); ranks "
                  "0,2 waited in it until it failed\n") != std::string::npos);
}

TEST_CASE("trace: missing ranks are named, mismatches are counted in full with both shapes") {
  std::vector<FakeEntry> odd;
  for (uint64_t s = 1; s <= 500; ++s)
    odd.push_back({s, int64_t(s) * 100, int64_t(s) * 100 + 50, "completed", s > 3 ? 5 : 4});
  std::vector<FakeEntry> even;
  for (uint64_t s = 1; s <= 500; ++s) even.push_back({s, int64_t(s) * 100, int64_t(s) * 100 + 50});
  const Findings v =
      merge({rank_file(0, 4, even), rank_file(1, 4, odd), "", rank_file(3, 4, even)}, 4);
  CHECK(v.missing() == std::vector<int>{2});
  CHECK(v.mismatched_collectives == 497);
  CHECK(v.mismatched_entries == 497);
  const std::string text = render_text(v, "d");
  INFO(text);
  CHECK(text.find("missing: rank 2 (no readable file") != std::string::npos);
  CHECK(text.find("mismatches: 497 collectives where ranks disagree (497 rank entries off the "
                  "majority); first #4: ranks 0,3 all_reduce (float32, [4]); rank 1 all_reduce "
                  "(float32, [5]) (differs in shape)\n") != std::string::npos);
}

TEST_CASE("trace: a straggler is named, healthy jittery runs name nobody") {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    INFO("seed " << seed);
    const Findings healthy = merge(job(4, 300, seed, 3000), 4);
    CHECK(healthy.stragglers.empty());
    CHECK(healthy.healthy());
    const Findings slow = merge(job(4, 300, seed, 3000, 2, 20000), 4);
    REQUIRE(slow.stragglers.size() == 1);
    CHECK(slow.stragglers[0].rank == 2);
    CHECK(slow.stragglers[0].median_late_ms > 15);
  }
  const std::string text = render_text(merge(job(4, 300, 7, 3000, 2, 20000), 4), "d");
  INFO(text);
  CHECK(text.find("straggler: rank 2 (node1, local rank 2) entered last, by 1 ms or more, in ") !=
        std::string::npos);
}

TEST_CASE("trace: the clock offsets line the ranks up") {
  // Rank 1's clock runs 50 ms ahead; its offset says so. Without it, rank 1 would look late.
  std::vector<FakeEntry> r0, r1;
  for (uint64_t s = 1; s <= 100; ++s) {
    r0.push_back({s, int64_t(s) * 10000, int64_t(s) * 10000 + 100});
    r1.push_back({s, int64_t(s) * 10000 + 50000, int64_t(s) * 10000 + 50100});
  }
  Merger m("run-1", 0, 2);
  m.add("a", parsed(rank_file(0, 2, r0)));
  m.add("b", parsed(rank_file(1, 2, r1, "exit", "run-1", -50000)));
  CHECK(m.finish().stragglers.empty());
}

TEST_CASE("trace DIR: an empty directory, a corrupt file, other runs, the pictures") {
  dtlaunch_test::TempDir dir;
  std::ostringstream out, err;
  CHECK(run_trace({dir.path(), TraceFormat::kText, "", "", ""}, out, err) == kTraceNoInput);
  CHECK(err.str() == "dtlaunch trace: " + dir.path() +
                         ": no flight record (*.json) in it; set DTLAUNCH_DDP_TRACE_DIR for the "
                         "job, and dump with kill -USR2 or at an error\n");
  CHECK_THROWS_AS(run_trace({dir.path() + "/nope", TraceFormat::kText, "", "", ""}, out, err),
                  core::Error);

  const auto files = job(4, 200, 3, 2000, 3, 20000);
  for (int r = 0; r < 4; ++r)
    write_file(dir, "run-1.a0.rank-" + std::to_string(r) + ".json", files[r]);
  write_file(dir, "run-1.a0.rank-1.json", files[1].substr(0, files[1].size() / 2));  // truncated
  write_file(dir, "old.a0.rank-0.json",
             rank_file(0, 2, {{1, 1, 2}}, "exit", "old")
                 .replace(rank_file(0, 2, {}, "exit", "old").find("9000000000"), 10, "1000000000"));
  out.str("");
  err.str("");
  const std::string html = dir.path() + "/t.html";
  CHECK(run_trace({dir.path(), TraceFormat::kText, html, "", ""}, out, err) == kTraceProblem);
  INFO(out.str());
  CHECK(out.str().find("missing: rank 1 (") != std::string::npos);
  CHECK(out.str().find("skipped: run-1.a0.rank-1.json: truncated at byte ") != std::string::npos);
  CHECK(out.str().find("straggler: rank 3 (") != std::string::npos);
  // The hint names the command that reads that attempt (tests/trace/attempts.py runs it).
  CHECK(out.str().find("other run in the directory: old attempt 0 (1 files; dtlaunch trace " +
                       dir.path() + " --run old --attempt 0)") != std::string::npos);
  std::ifstream page(html);
  std::stringstream p;
  p << page.rdbuf();
  CHECK(p.str().find("rank 3 (node1) STRAGGLER") != std::string::npos);
  CHECK(p.str().find("rank 1 MISSING") != std::string::npos);

  std::ostringstream chrome, verdict;
  CHECK(run_trace({dir.path(), TraceFormat::kChrome, "", "", ""}, chrome, verdict) ==
        kTraceProblem);
  CHECK(chrome.str().rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", 0) == 0);
  CHECK(chrome.str().find("\"name\": \"waits for rank 3\"") != std::string::npos);
  std::ostringstream json;
  CHECK(run_trace({dir.path(), TraceFormat::kJson, "", "", ""}, json, verdict) == kTraceProblem);
  CHECK(json.str().find("\"missing_ranks\": [1],") != std::string::npos);

  // --html refuses what is not a regular file and follows no symlink.
  ::symlink("/dev/null", (dir.path() + "/link.html").c_str());
  CHECK_THROWS_AS(
      run_trace({dir.path(), TraceFormat::kText, dir.path() + "/link.html", "", ""}, out, err),
      core::Error);
  CHECK_THROWS_AS(run_trace({dir.path(), TraceFormat::kText, "", "nosuchrun", ""}, out, err),
                  core::Error);
}
