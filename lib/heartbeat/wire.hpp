// The heartbeat's messages on the wire: fixed 64-byte frames, little-endian, so that a reader
// needs no framing state beyond a partial frame. Each frame is sealed to the job and to its
// receiver (docs/security.md): it carries its sender, the sender's sequence number and, when the
// job has a key, a truncated HMAC-SHA256 under that key over the frame and the receiver's rank
// (not transmitted, so a frame sent to one rank is refused by every other).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/hmac.hpp"
#include "heartbeat/ring.hpp"

namespace dtlaunch::heartbeat {

constexpr size_t kFrameBytes = 64;
constexpr size_t kMacBytes = 16;
using Frame = std::array<uint8_t, kFrameBytes>;

enum class FrameType : uint8_t { kHello = 1, kBeat = 2, kVerdict = 3, kBye = 4 };

struct Message {
  FrameType type = FrameType::kBeat;
  int rank = -1;      // the sender (hello, beat, bye), the lost rank (verdict)
  uint64_t tag = 0;   // hello: the job's tag, so that another job's ranks are refused
  Position position;  // beat: the sender's; verdict: the lost rank's last
  Verdict verdict;    // verdict only
};

// Who sends a frame to whom, and on which link: a frame sent on a connection its sender opened
// cannot be replayed on one the receiver opened (the two are numbered apart, see Gate).
struct Envelope {
  int sender = -1;
  int receiver = -1;
  uint64_t seq = 0;  // strictly increasing per sender, receiver and direction
  bool sender_opened = false;
};

using Key = std::optional<core::JobKey>;

Frame encode(const Message& m, const Envelope& e, const Key& key);

enum class Refusal {
  kNone,
  kMalformed,    // not one of ours: wrong magic, type or field
  kBadMac,       // not sealed with the job's key for this receiver and direction
  kBadTag,       // a hello with another job's tag (no key)
  kReplayed,     // a sequence number not above the last accepted from that sender
  kBeforeHello,  // anything but a hello on a connection that has not said one
  kNoHello,      // a connection that did not say hello in time (counted by the node)
};
const char* refusal_name(Refusal r);

struct Opened {
  Refusal refusal = Refusal::kNone;
  Message message;
  Envelope envelope;
};
// The frame as sent to `receiver` on a link whose direction is `sender_opened`, checked against
// `key` (none: only its shape). Checks neither sequence nor hello: Gate does.
Opened decode(const Frame& f, int receiver, bool sender_opened, const Key& key);

}  // namespace dtlaunch::heartbeat
