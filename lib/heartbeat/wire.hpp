// The heartbeat's messages on the wire: fixed 32-byte frames, little-endian, so that a reader
// needs no framing state beyond a partial frame.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "heartbeat/ring.hpp"

namespace dtlaunch::heartbeat {

constexpr size_t kFrameBytes = 32;
using Frame = std::array<uint8_t, kFrameBytes>;

enum class FrameType : uint8_t { kHello = 1, kBeat = 2, kVerdict = 3, kBye = 4 };

struct Message {
  FrameType type = FrameType::kBeat;
  int rank = -1;      // the sender (hello, beat, bye), the lost rank (verdict)
  uint64_t tag = 0;   // hello: the job's tag, so that another job's ranks are refused
  Position position;  // beat: the sender's; verdict: the lost rank's last
  Verdict verdict;    // verdict only
};

Frame encode(const Message& m);
// nullopt for a frame that is not one of ours (wrong magic or type).
std::optional<Message> decode(const Frame& f);

}  // namespace dtlaunch::heartbeat
