// What a rank's heartbeat accepts (docs/security.md): the pure check between a frame read from a
// connection and the ring, and the numbering of the frames it sends. A frame is acted on only
// when it is sealed with the job's key for this rank (or, without a key, has the job's shape),
// arrives after a valid hello on its connection, and is numbered above every frame accepted
// before from its sender in that direction. Everything else is dropped and counted, never acted
// on.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "heartbeat/wire.hpp"

namespace dtlaunch::heartbeat {

// A connection as the gate sees it.
struct LinkGate {
  bool peer_opened = false;  // accepted here: the peer opened it
  int rank = -1;             // the peer: known when this rank opened it, else from its hello
  bool greeted = false;      // the peer's valid hello has arrived
};

// Frames refused so far, by reason (Refusal's order; kNone unused).
struct Refused {
  std::array<uint64_t, 7> by{};
  uint64_t total() const;
  // "3 refused (bad MAC 2, no hello in time 1)"; "" when none.
  std::string summary() const;
};

class Gate {
 public:
  Gate(int self, int world, uint64_t tag, Key key);

  // The message to act on, or nullopt (counted) for one to drop. A hello marks the link
  // greeted (and names its peer).
  std::optional<Message> admit(const Frame& f, LinkGate& link);
  void count(Refusal r) { ++refused_.by[static_cast<size_t>(r)]; }
  const Refused& refused() const { return refused_; }

  // `m` sealed for `receiver`, on a link this rank opened (`opened_here`) or accepted.
  Frame seal(const Message& m, int receiver, bool opened_here);

 private:
  std::optional<Message> refuse(Refusal r);

  int self_, world_;
  uint64_t tag_;
  Key key_;
  uint64_t next_seq_;
  // The last sequence number accepted, per sender and direction (whether the sender opened the
  // link): two links between the same ranks carry interleaved numbers, each in order.
  std::map<std::pair<int, bool>, uint64_t> last_;
  Refused refused_;
};

}  // namespace dtlaunch::heartbeat
