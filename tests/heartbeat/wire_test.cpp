// The heartbeat's frames and its gate (docs/security.md): what a frame carries, and that a frame
// that is tampered with, replayed, meant for another rank or direction, sealed with another job's
// key, or sent before a hello is refused and counted, never acted on.
#include "heartbeat/wire.hpp"

#include <vector>

#include "dtlaunch_catch.hpp"
#include "heartbeat/gate.hpp"

using namespace dtlaunch;
using namespace dtlaunch::heartbeat;
using std::chrono::milliseconds;

namespace {

constexpr uint64_t kTag = 0x5eed;

Message hello(int rank) {
  Message m;
  m.type = FrameType::kHello;
  m.rank = rank;
  m.tag = kTag;
  return m;
}

Message verdict(int lost, int seen_by) {
  Message m;
  m.type = FrameType::kVerdict;
  m.rank = lost;
  m.position = {123456789012ull, 3};
  m.verdict = {lost, How::kExited, seen_by, milliseconds(12345), m.position};
  return m;
}

// Rank 0 opens a connection to rank 1 and says hello; rank 1's gate has admitted it.
struct Pair {
  Key key;
  Gate sender, receiver;
  LinkGate link{true, -1, false};
  explicit Pair(Key k) : key(k), sender(0, 4, kTag, k), receiver(1, 4, kTag, k) {
    REQUIRE(receiver.admit(sender.seal(hello(0), 1, true), link));
    REQUIRE(link.greeted);
  }
};

}  // namespace

TEST_CASE("frames round-trip with their envelope") {
  const Key key = core::make_job_key();
  for (const Key& k : {key, Key{}}) {
    const Frame f = encode(verdict(4095, 4094), {7, 9, 77, true}, k);
    const Opened o = decode(f, 9, true, k);
    REQUIRE(o.refusal == Refusal::kNone);
    CHECK(o.message.verdict.rank == 4095);
    CHECK(o.message.verdict.how == How::kExited);
    CHECK(o.message.verdict.seen_by == 4094);
    CHECK(o.message.verdict.silent_for == milliseconds(12345));
    CHECK(o.message.verdict.last.seq == 123456789012ull);
    CHECK(o.envelope.sender == 7);
    CHECK(o.envelope.seq == 77);
  }
  CHECK(decode(Frame{}, 1, true, Key{}).refusal == Refusal::kMalformed);
  CHECK(decode(Frame{}, 1, true, key).refusal == Refusal::kBadMac);
}

TEST_CASE("a sealed frame with any byte changed is refused") {
  Pair p(core::make_job_key());
  const Frame good = p.sender.seal(verdict(2, 0), 1, true);
  for (size_t i = 0; i < kFrameBytes; ++i) {
    for (const uint8_t flip : {0x01, 0x80}) {
      Frame bad = good;
      bad[i] ^= flip;
      INFO("byte " << i);
      CHECK_FALSE(p.receiver.admit(bad, p.link));
    }
  }
  CHECK(p.receiver.refused().by[static_cast<size_t>(Refusal::kBadMac)] == 2 * kFrameBytes);
  CHECK(p.receiver.admit(good, p.link));  // the original still passes, once
}

TEST_CASE("the gate refuses what an outsider can send") {
  const Key key = core::make_job_key();
  struct Case {
    const char* name;
    Key job_key;
    Refusal why;
    // Sends frames through `p` and returns the one that must be refused.
    Frame (*forge)(Pair& p);
  };
  const Case cases[] = {
      {"replayed: the same frame twice", key, Refusal::kReplayed,
       [](Pair& p) {
         const Frame f = p.sender.seal(verdict(2, 0), 1, true);
         REQUIRE(p.receiver.admit(f, p.link));
         return f;
       }},
      {"replayed: an older frame after a newer one", key, Refusal::kReplayed,
       [](Pair& p) {
         const Frame older = p.sender.seal(verdict(2, 0), 1, true);
         REQUIRE(p.receiver.admit(p.sender.seal(verdict(3, 0), 1, true), p.link));
         return older;
       }},
      {"sealed for another receiver", key, Refusal::kBadMac,
       [](Pair& p) { return p.sender.seal(verdict(2, 0), 2, true); }},
      {"sealed for the other direction", key, Refusal::kBadMac,
       [](Pair& p) { return p.sender.seal(verdict(2, 0), 1, false); }},
      {"sealed with another job's key", key, Refusal::kBadMac,
       [](Pair&) {
         Gate other(0, 4, kTag, core::make_job_key());
         return other.seal(verdict(2, 0), 1, true);
       }},
      {"unsealed, from a forger who knows the layout", key, Refusal::kBadMac,
       [](Pair&) {
         Gate forger(0, 4, kTag, Key{});
         return forger.seal(verdict(2, 0), 1, true);
       }},
      {"without a key: replayed still", Key{}, Refusal::kReplayed,
       [](Pair& p) {
         const Frame f = p.sender.seal(verdict(2, 0), 1, true);
         REQUIRE(p.receiver.admit(f, p.link));
         return f;
       }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Pair p(c.job_key);
    const Frame f = c.forge(p);
    const uint64_t before = p.receiver.refused().total();
    CHECK_FALSE(p.receiver.admit(f, p.link));
    CHECK(p.receiver.refused().by[static_cast<size_t>(c.why)] == 1);
    CHECK(p.receiver.refused().total() == before + 1);
  }
}

TEST_CASE("nothing but a valid hello opens a connection") {
  for (const Key& key : {Key{core::make_job_key()}, Key{}}) {
    Gate sender(0, 4, kTag, key), receiver(1, 4, kTag, key);
    LinkGate link{true, -1, false};
    // The 32-byte verdict frame of issue 35, now: a verdict with no hello before it.
    CHECK_FALSE(receiver.admit(sender.seal(verdict(2, 0), 1, true), link));
    CHECK(receiver.refused().by[static_cast<size_t>(Refusal::kBeforeHello)] == 1);
    Message other_job = hello(0);  // another job's tag
    other_job.tag = kTag + 1;
    CHECK_FALSE(receiver.admit(sender.seal(other_job, 1, true), link));
    CHECK(receiver.refused().by[static_cast<size_t>(Refusal::kBadTag)] == 1);
    Message impostor = hello(3);  // a hello that names another rank than its sender
    CHECK_FALSE(receiver.admit(sender.seal(impostor, 1, true), link));
    CHECK_FALSE(link.greeted);
    CHECK(receiver.admit(sender.seal(hello(0), 1, true), link));
    CHECK(link.greeted);
    CHECK(link.rank == 0);
    CHECK(receiver.admit(sender.seal(verdict(2, 0), 1, true), link));
    // Once identified, the link speaks for its rank only.
    Gate rank2(2, 4, kTag, key);
    CHECK_FALSE(receiver.admit(rank2.seal(verdict(3, 2), 1, true), link));
  }
}

TEST_CASE("a truncated frame completed by anything else fails the MAC") {
  Pair p(core::make_job_key());
  const Frame good = p.sender.seal(verdict(2, 0), 1, true);
  for (size_t cut = 0; cut < kFrameBytes; cut += 7) {
    Frame f{};
    std::copy_n(good.begin(), cut, f.begin());
    CHECK_FALSE(p.receiver.admit(f, p.link));
  }
}

TEST_CASE("refusals are summed up in one line") {
  Refused r;
  CHECK(r.summary().empty());
  r.by[static_cast<size_t>(Refusal::kBadMac)] = 2;
  r.by[static_cast<size_t>(Refusal::kNoHello)] = 1;
  CHECK(r.summary() == "3 refused (bad MAC 2, no hello in time 1)");
}
