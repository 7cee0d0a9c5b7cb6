#include "heartbeat/gate.hpp"

#include <ctime>

namespace dtlaunch::heartbeat {
namespace {

// Numbers start at the wall clock's nanoseconds, so that a rank's next heartbeat (a new Node in
// the same process) numbers above its last one's without keeping any state.
uint64_t first_seq() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

uint64_t Refused::total() const {
  uint64_t n = 0;
  for (const uint64_t k : by) n += k;
  return n;
}

std::string Refused::summary() const {
  if (total() == 0) return "";
  std::string parts;
  for (size_t i = 1; i < by.size(); ++i) {
    if (!by[i]) continue;
    if (!parts.empty()) parts += ", ";
    parts += std::string(refusal_name(static_cast<Refusal>(i))) + " " + std::to_string(by[i]);
  }
  return std::to_string(total()) + " refused (" + parts + ")";
}

Gate::Gate(int self, int world, uint64_t tag, Key key)
    : self_(self), world_(world), tag_(tag), key_(key), next_seq_(first_seq()) {}

std::optional<Message> Gate::refuse(Refusal r) {
  count(r);
  return std::nullopt;
}

std::optional<Message> Gate::admit(const Frame& f, LinkGate& link) {
  const Opened o = decode(f, self_, link.peer_opened, key_);
  if (o.refusal != Refusal::kNone) return refuse(o.refusal);
  const Message& m = o.message;
  const int sender = o.envelope.sender;
  if (sender < 0 || sender >= world_ || sender == self_ || m.rank < 0 || m.rank >= world_)
    return refuse(Refusal::kMalformed);
  if (link.rank >= 0 && sender != link.rank) return refuse(Refusal::kMalformed);
  if (m.type == FrameType::kHello) {
    if (m.rank != sender) return refuse(Refusal::kMalformed);
    if (m.tag != tag_) return refuse(Refusal::kBadTag);
  } else if (!link.greeted) {
    return refuse(Refusal::kBeforeHello);
  }
  if ((m.type == FrameType::kBeat || m.type == FrameType::kBye) && m.rank != sender)
    return refuse(Refusal::kMalformed);
  uint64_t& last = last_[{sender, link.peer_opened}];
  if (o.envelope.seq <= last) return refuse(Refusal::kReplayed);
  last = o.envelope.seq;
  if (m.type == FrameType::kHello) {
    link.greeted = true;
    link.rank = sender;
  }
  return m;
}

Frame Gate::seal(const Message& m, int receiver, bool opened_here) {
  return encode(m, {self_, receiver, next_seq_++, opened_here}, key_);
}

}  // namespace dtlaunch::heartbeat
