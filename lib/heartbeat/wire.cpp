#include "heartbeat/wire.hpp"

#include <algorithm>
#include <span>

#include "core/names.hpp"

namespace dtlaunch::heartbeat {
namespace {

// Changed from the 32-byte frames' 0xB7, so that an older dtlaunch's frames are refused whole.
constexpr uint8_t kMagic = 0xB8;
constexpr size_t kSealedBytes = kFrameBytes - kMacBytes;

void put(Frame& f, size_t at, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) f[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const Frame& f, size_t at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(f[at + i]) << (8 * i);
  return v;
}

// The MAC binds what is not sent: the receiver's rank and the link's direction.
std::array<uint8_t, kMacBytes> mac(const Frame& f, int receiver, bool sender_opened,
                                   const core::JobKey& key) {
  std::array<uint8_t, 5> bound{};
  for (size_t i = 0; i < 4; ++i) bound[i] = static_cast<uint8_t>(uint32_t(receiver) >> (8 * i));
  bound[4] = sender_opened ? 1 : 2;
  const core::Digest d =
      core::hmac_sha256(key.bytes, {std::span<const uint8_t>(f.data(), kSealedBytes), bound});
  std::array<uint8_t, kMacBytes> out;
  std::copy_n(d.begin(), kMacBytes, out.begin());
  return out;
}

}  // namespace

const char* refusal_name(Refusal r) {
  static constexpr core::Named<Refusal> kNames[] = {
      {Refusal::kNone, "accepted"},           {Refusal::kMalformed, "malformed"},
      {Refusal::kBadMac, "bad MAC"},          {Refusal::kBadTag, "another job's tag"},
      {Refusal::kReplayed, "replayed"},       {Refusal::kBeforeHello, "before hello"},
      {Refusal::kNoHello, "no hello in time"}};
  return core::name_of(r, kNames).data();  // literals: NUL-terminated
}

// Layout: magic, type, how, op, rank (4), seen_by (4), silent ms (4), position seq (8), tag (8),
// sender (4), sequence (8), zero (4), MAC (16; zero without a key).
Frame encode(const Message& m, const Envelope& e, const Key& key) {
  Frame f{};
  f[0] = kMagic;
  f[1] = static_cast<uint8_t>(m.type);
  f[2] = static_cast<uint8_t>(m.verdict.how);
  f[3] = m.position.op;
  put(f, 4, static_cast<uint32_t>(m.rank), 4);
  put(f, 8, static_cast<uint32_t>(m.verdict.seen_by), 4);
  put(f, 12, static_cast<uint32_t>(m.verdict.silent_for.count()), 4);
  put(f, 16, m.position.seq, 8);
  put(f, 24, m.tag, 8);
  put(f, 32, static_cast<uint32_t>(e.sender), 4);
  put(f, 36, e.seq, 8);
  if (key) {
    const auto m16 = mac(f, e.receiver, e.sender_opened, *key);
    std::copy(m16.begin(), m16.end(), f.begin() + kSealedBytes);
  }
  return f;
}

Opened decode(const Frame& f, int receiver, bool sender_opened, const Key& key) {
  Opened o;
  // The MAC first: nothing of a frame that fails it is looked at.
  if (key) {
    const auto want = mac(f, receiver, sender_opened, *key);
    if (!core::equal_constant_time(want,
                                   std::span<const uint8_t>(f.data() + kSealedBytes, kMacBytes))) {
      o.refusal = Refusal::kBadMac;
      return o;
    }
  }
  if (f[0] != kMagic || f[1] < 1 || f[1] > 4 || get(f, 44, 4) != 0) {
    o.refusal = Refusal::kMalformed;
    return o;
  }
  Message& m = o.message;
  m.type = static_cast<FrameType>(f[1]);
  m.rank = static_cast<int32_t>(get(f, 4, 4));
  m.position.op = f[3];
  m.position.seq = get(f, 16, 8);
  m.tag = get(f, 24, 8);
  o.envelope = {static_cast<int32_t>(get(f, 32, 4)), receiver, get(f, 36, 8), sender_opened};
  if (m.type == FrameType::kVerdict) {
    if (f[2] < 1 || f[2] > 3) o.refusal = Refusal::kMalformed;
    m.verdict.rank = m.rank;
    m.verdict.how = static_cast<How>(f[2]);
    m.verdict.seen_by = static_cast<int32_t>(get(f, 8, 4));
    m.verdict.silent_for = milliseconds(get(f, 12, 4));
    m.verdict.last = m.position;
  }
  return o;
}

}  // namespace dtlaunch::heartbeat
