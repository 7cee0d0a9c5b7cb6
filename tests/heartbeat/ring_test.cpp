// The heartbeat's core on simulated time: who watches whom, the three kinds of loss, the ring's
// corner cases (two neighbours lost at once, a ring of two, rank 0), and that a slow rank that
// keeps beating is never declared lost.
#include "heartbeat/ring.hpp"

#include <algorithm>

#include "dtlaunch_catch.hpp"
#include "heartbeat/simulation.hpp"
#include "heartbeat/wire.hpp"

using namespace dtlaunch::heartbeat;
using std::chrono::milliseconds;

namespace {

Settings settings(int timeout_ms = 3000, int interval_ms = 500) {
  Settings s;
  s.timeout = milliseconds(timeout_ms);
  s.interval = milliseconds(interval_ms);
  return s;
}

TimePoint at(int ms) {
  return TimePoint{} + milliseconds(ms);
}

std::vector<int> lost_ranks(const std::vector<Verdict>& vs) {
  std::vector<int> out;
  for (const auto& v : vs) out.push_back(v.rank);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("each rank watches its successor and skips lost ranks") {
  Ring ring(2, 5, settings(), at(0));
  CHECK(ring.watched() == 3);
  CHECK(ring.predecessor() == 1);
  CHECK(ring.neighbours() == std::vector<int>{1, 3});
  ring.closed(3, at(10));
  CHECK(ring.watched() == 4);
  Verdict v;
  v.rank = 4;
  v.seen_by = 0;
  CHECK(ring.receive(v, at(20)));
  CHECK_FALSE(ring.receive(v, at(21)));  // news once
  CHECK(ring.watched() == 0);            // wraps around
  CHECK(lost_ranks(ring.take_news()) == std::vector<int>{3, 4});
  CHECK(ring.take_news().empty());
}

TEST_CASE("a ring of two: each watches the other, one neighbour") {
  Ring ring(1, 2, settings(), at(0));
  CHECK(ring.watched() == 0);
  CHECK(ring.neighbours() == std::vector<int>{0});
  ring.closed(0, at(5));
  CHECK(ring.watched() == -1);
  CHECK(ring.neighbours().empty());
  CHECK(ring.next_deadline() == TimePoint::max());
  ring.tick(at(100000));  // alone: nothing more to declare
  CHECK(ring.verdicts().size() == 1);
}

TEST_CASE("silence: probed before the limit, frozen or unreachable at it, never before") {
  // After a beat the limit is the timeout plus one interval (3 s + 0.5 s): the beat may have
  // come up to an interval before the rank stopped.
  for (const Probe probe : {Probe::kAccepted, Probe::kTimedOut}) {
    Ring ring(0, 3, settings(3000), at(0));
    ring.heard(1, at(1000), Position{41, 2});
    CHECK_FALSE(ring.probe_due(at(3700)).has_value());  // 2.7 s silent: not yet
    CHECK(ring.probe_due(at(3750)) == 1);               // limit - probe lead (750 ms)
    CHECK_FALSE(ring.probe_due(at(3800)).has_value());  // once
    ring.probed(1, probe, at(3760));
    ring.tick(at(4499));
    CHECK(ring.verdicts().empty());
    CHECK(ring.next_deadline() == at(4500));
    ring.tick(at(4500));
    REQUIRE(ring.verdicts().size() == 1);
    const Verdict& v = ring.verdicts()[0];
    CHECK(v.rank == 1);
    CHECK(v.how == (probe == Probe::kAccepted ? How::kFrozen : How::kUnreachable));
    CHECK(v.silent_for == milliseconds(3500));
    CHECK(v.last.seq == 41);
    CHECK(v.seen_by == 0);
    CHECK(ring.watched() == 2);
  }
}

TEST_CASE("at start-up the successor has three timeouts until it first speaks") {
  Ring ring(0, 3, settings(3000), at(0));
  ring.heard(1, at(100));  // the TCP handshake: its kernel, not yet its heartbeat thread
  ring.tick(at(8000));
  CHECK(ring.verdicts().empty());
  CHECK(ring.probe_due(at(8350)) == 1);
  ring.tick(at(9100));
  REQUIRE(ring.verdicts().size() == 1);
  // Once it spoke, one timeout and one interval after its last beat.
  Ring spoke(0, 3, settings(3000), at(0));
  spoke.heard(1, at(100), Position{1, 1});
  spoke.tick(at(3599));
  CHECK(spoke.verdicts().empty());
  spoke.tick(at(3600));
  CHECK(spoke.verdicts().size() == 1);
}

TEST_CASE("with one start-up timeout the first successor is lost after one timeout of silence") {
  // The DDP runtime starts a rank's heartbeat thread before it publishes its endpoint.
  Settings s = settings(3000);
  s.startup_timeouts = 1;
  Ring ring(0, 3, s, at(0));
  ring.heard(1, at(100));  // the TCP handshake of a process frozen since it published
  CHECK(ring.probe_due(at(2350)) == 1);
  ring.probed(1, Probe::kAccepted, at(2360));
  ring.tick(at(3100));
  REQUIRE(ring.verdicts().size() == 1);
  CHECK(ring.verdicts()[0].how == How::kFrozen);
}

TEST_CASE("a beat after the probe clears the silence") {
  Ring ring(0, 3, settings(3000), at(0));
  ring.heard(1, at(0), Position{});
  CHECK(ring.probe_due(at(2750)) == 1);
  ring.probed(1, Probe::kAccepted, at(2760));
  ring.heard(1, at(2900));
  ring.tick(at(3500));
  ring.tick(at(5500));
  CHECK(ring.verdicts().empty());
  CHECK(ring.probe_due(at(5650)) == 1);  // a new silence gets a new probe
}

TEST_CASE("a refused connection or probe means the rank exited") {
  Ring ring(0, 4, settings(), at(0));
  ring.connect_failed(1, Probe::kRefused, at(1));
  ring.connect_failed(3, Probe::kRefused, at(1));  // not watched: no verdict from here
  CHECK(lost_ranks(ring.verdicts()) == std::vector<int>{1});
  CHECK(ring.verdicts()[0].how == How::kExited);
  CHECK(ring.probe_due(at(2251)) == 2);  // watched since t = 1 ms
  ring.probed(2, Probe::kRefused, at(2252));
  CHECK(lost_ranks(ring.verdicts()) == std::vector<int>{1, 2});
}

TEST_CASE("a goodbye is no loss") {
  Ring ring(0, 3, settings(), at(0));
  ring.departed(1, at(10));
  CHECK(ring.verdicts().empty());
  CHECK(ring.watched() == 2);
  ring.closed(1, at(11));  // its EOF after the goodbye
  CHECK(ring.verdicts().empty());
}

TEST_CASE("ranks ending together: a successor gone before it answered the switch is no loss") {
  // Ranks 0, 3 and 2 end in that order (slurm.watch, issue 21): 0's goodbye reaches 3 and 1,
  // 3's reaches 2, and 2 then connects to 0, whose goodbye it never heard.
  Ring ring(2, 4, settings(), at(0));
  ring.heard(3, at(5), Position{});
  ring.departed(3, at(10));
  CHECK(ring.watched() == 0);
  ring.connect_failed(0, Probe::kRefused, at(11));  // 0 had closed its listener
  CHECK(ring.verdicts().empty());
  CHECK(ring.watched() == 1);
  ring.heard(1, at(12));  // accepted, then reset from the backlog of a listener closing
  ring.closed(1, at(13));
  CHECK(ring.verdicts().empty());
  CHECK(ring.watched() == -1);
}

TEST_CASE("after a goodbye, a successor that answered and then exits is lost") {
  Ring ring(2, 4, settings(), at(0));
  ring.departed(3, at(10));
  ring.heard(0, at(11), Position{});  // its hello
  ring.closed(0, at(500));
  CHECK(lost_ranks(ring.verdicts()) == std::vector<int>{0});
  CHECK(ring.watched() == 1);
  ring.connect_failed(1, Probe::kRefused, at(501));  // after a loss: a loss
  CHECK(lost_ranks(ring.verdicts()) == std::vector<int>{0, 1});
}

TEST_CASE("after a goodbye, a silent successor is still frozen or unreachable") {
  Ring ring(2, 4, settings(), at(0));
  ring.departed(3, at(10));
  ring.tick(at(1509));
  CHECK(ring.verdicts().empty());
  ring.tick(at(1510));  // half a timeout after the switch, as after any loss
  CHECK(lost_ranks(ring.verdicts()) == std::vector<int>{0});
  CHECK(ring.verdicts()[0].how == How::kUnreachable);
}

// The whole ring on simulated time.
TEST_CASE(
    "simulated: every survivor learns of each loss, by how it was seen, within timeout + "
    "interval") {
  struct Case {
    const char* name;
    int world;
    std::vector<SimulationSetup::Injection> faults;
    std::vector<int> lost;
    How how;
  };
  const milliseconds t(5000);
  const std::vector<Case> cases = {
      {"exit", 8, {{5, Fault::kExit, t}}, {5}, How::kExited},
      {"freeze", 8, {{5, Fault::kFreeze, t}}, {5}, How::kFrozen},
      {"partition", 8, {{5, Fault::kPartition, t}}, {5}, How::kUnreachable},
      {"rank 0 exits", 8, {{0, Fault::kExit, t}}, {0}, How::kExited},
      {"rank 0 frozen", 8, {{0, Fault::kFreeze, t}}, {0}, How::kFrozen},
      {"two neighbours exit at once",
       8,
       {{3, Fault::kExit, t}, {4, Fault::kExit, t}},
       {3, 4},
       How::kExited},
      {"two neighbours freeze at once",
       8,
       {{3, Fault::kFreeze, t}, {4, Fault::kFreeze, t}},
       {3, 4},
       How::kFrozen},
      {"a rank's both neighbours freeze",
       8,
       {{3, Fault::kFreeze, t}, {5, Fault::kFreeze, t}},
       {3, 5},
       How::kFrozen},
      {"ring of two, one exits", 2, {{1, Fault::kExit, t}}, {1}, How::kExited},
      {"ring of two, one freezes", 2, {{0, Fault::kFreeze, t}}, {0}, How::kFrozen},
      {"ring of three, two freeze",
       3,
       {{1, Fault::kFreeze, t}, {2, Fault::kFreeze, t}},
       {1, 2},
       How::kFrozen},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    SimulationSetup setup;
    setup.world = c.world;
    setup.settings = settings(3000, 500);
    setup.faults = c.faults;
    setup.duration = milliseconds(15000);
    const SimulationResult r = simulate(setup);
    for (int rank = 0; rank < c.world; ++rank) {
      if (std::find(c.lost.begin(), c.lost.end(), rank) != c.lost.end()) continue;
      INFO("rank " << rank);
      const auto& vs = r.verdicts[static_cast<size_t>(rank)];
      CHECK(lost_ranks(vs) == c.lost);
      for (const auto& v : vs) CHECK(v.how == c.how);
      // Declared within the timeout and one interval (+ the network's few milliseconds); the
      // faults fall just before a beat, the worst case.
      CHECK(r.first_verdict_ms[static_cast<size_t>(rank)] >= 0);
      CHECK(r.first_verdict_ms[static_cast<size_t>(rank)] <= 3000 + 500 + 100);
      // Every loss, even of two neighbours frozen at once: 1.5 timeouts and one interval.
      CHECK(r.all_verdicts_ms[static_cast<size_t>(rank)] <= 4500 + 500 + 100);
    }
  }
}

TEST_CASE("simulated: no loss, no verdict, two beats per rank per interval") {
  SimulationSetup setup;
  setup.world = 64;
  setup.settings = settings(3000, 500);
  setup.duration = milliseconds(10000);
  const SimulationResult r = simulate(setup);
  for (const auto& vs : r.verdicts) CHECK(vs.empty());
  // 64 ranks x 2 neighbours x 21 beats sent (t = 0, 0.5, ..., 10 s); the last ones arrive
  // after the end.
  CHECK(r.messages == 64u * 2u * 21u);
  CHECK(r.max_received_by_one == 2u * 20u);
}

TEST_CASE("simulated: a slow network up to the timeout minus an interval is no loss") {
  SimulationSetup setup;
  setup.world = 16;
  setup.settings = settings(3000, 500);
  setup.latency = milliseconds(2400);
  setup.duration = milliseconds(20000);
  const SimulationResult r = simulate(setup);
  for (const auto& vs : r.verdicts) CHECK(vs.empty());
}

// Issue 35 E: rank 0 stopped for 4.5 s (3 busy ranks, timeout 5 s, interval 1 s) was declared
// "frozen (silent for 5.001 s)": the silence counted the time from its last beat to the freeze
// too. The timeout is how long a rank may be frozen: at every phase of the freeze against the
// beats, a freeze of the timeout less 10 ms is no loss, and one of the timeout and an interval
// and 10 ms more is declared, within timeout + interval of the freeze.
TEST_CASE("simulated: a freeze shorter than the timeout is no loss, a longer one is declared") {
  const struct {
    int timeout_ms, interval_ms;
  } cases[] = {{5000, 1000}, {3000, 600}, {3000, 500}, {10000, 1000}};
  for (const auto& c : cases) {
    for (int tenth = 0; tenth < 10; ++tenth) {
      const milliseconds freeze_at(20000 + c.interval_ms * tenth / 10);
      const milliseconds timeout(c.timeout_ms), interval(c.interval_ms), eps(10);
      for (const bool longer : {false, true}) {
        INFO("timeout " << c.timeout_ms << " ms, interval " << c.interval_ms << " ms, frozen at "
                        << freeze_at.count() << " ms for "
                        << (longer ? "timeout + interval + 10 ms" : "timeout - 10 ms"));
        SimulationSetup setup;
        setup.world = 3;
        setup.settings = settings(c.timeout_ms, c.interval_ms);
        setup.settings.startup_timeouts = 1;
        const milliseconds length = longer ? timeout + interval + eps : timeout - eps;
        setup.faults = {{0, Fault::kFreeze, freeze_at}, {0, Fault::kResume, freeze_at + length}};
        setup.duration = freeze_at + length + 3 * timeout;
        const SimulationResult r = simulate(setup);
        for (const int rank : {1, 2}) {
          INFO("rank " << rank);
          const auto& vs = r.verdicts[static_cast<size_t>(rank)];
          if (!longer) {
            CHECK(vs.empty());
            continue;
          }
          // The first verdict (rank 0, thawed after it, may then accuse its own successor,
          // whose beats it missed while frozen: the zombie's business, not this test's).
          REQUIRE(!vs.empty());
          CHECK(vs[0].rank == 0);
          CHECK(vs[0].how == How::kFrozen);
          CHECK(r.first_verdict_ms[static_cast<size_t>(rank)] <=
                (timeout + interval + milliseconds(5)).count());
        }
      }
    }
  }
}
