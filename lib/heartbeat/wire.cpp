#include "heartbeat/wire.hpp"

namespace dtlaunch::heartbeat {
namespace {

constexpr uint8_t kMagic = 0xB7;

void put(Frame& f, size_t at, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) f[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const Frame& f, size_t at, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(f[at + i]) << (8 * i);
  return v;
}

}  // namespace

// Layout: magic, type, how, op, rank (4), seen_by (4), silent ms (4), seq (8), tag (8).
Frame encode(const Message& m) {
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
  return f;
}

std::optional<Message> decode(const Frame& f) {
  if (f[0] != kMagic || f[1] < 1 || f[1] > 4) return std::nullopt;
  Message m;
  m.type = static_cast<FrameType>(f[1]);
  m.rank = static_cast<int32_t>(get(f, 4, 4));
  m.position.op = f[3];
  m.position.seq = get(f, 16, 8);
  m.tag = get(f, 24, 8);
  if (m.type == FrameType::kVerdict) {
    if (f[2] < 1 || f[2] > 3) return std::nullopt;
    m.verdict.rank = m.rank;
    m.verdict.how = static_cast<How>(f[2]);
    m.verdict.seen_by = static_cast<int32_t>(get(f, 8, 4));
    m.verdict.silent_for = milliseconds(get(f, 12, 4));
    m.verdict.last = m.position;
  }
  return m;
}

}  // namespace dtlaunch::heartbeat
