// The heartbeat's pure core: who watches whom on a ring of ranks, when a watched rank is lost and
// how, and which verdicts to pass on. No I/O and no clock of its own: the shell (node.hpp) feeds
// it events with the time they happened, so that tests and the scale benchmark run it on
// simulated time.
//
// Each rank watches its successor, the next rank on the ring not yet known to be lost. A rank is
// lost when its connection closes (exited), when it stays unresponsive for the timeout (frozen
// when a fresh connect() to it still completes, unreachable when it does not), or when a
// connection to it is refused or times out. Unresponsive for the timeout: silent for the timeout
// plus one interval since its last heartbeat, the beat that was due when it stopped; so a
// freeze shorter than the timeout is never declared, and a longer one within timeout +
// interval. A verdict is flooded both ways along the ring, so every rank hears of it after at
// most world/2 hops and nothing ever reaches every rank at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtlaunch::heartbeat {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using std::chrono::milliseconds;

// How many ranks ahead on the ring a rank knows the endpoints of (the DDP runtime reads them from
// the store, dtlaunch --watch gets them from rank 0's exchange): it can skip this many lost ranks
// in a row and still watch the next one.
inline constexpr int kEndpointWindow = 8;

enum class How : uint8_t {
  kExited = 1,       // its connection closed, or a connect() to it was refused
  kFrozen = 2,       // silent for the timeout while its host still completes a TCP handshake
  kUnreachable = 3,  // silent for the timeout and a connect() to it times out
};
const char* to_string(How how) noexcept;

// Where the rank last said it was (its heartbeats carry it): the sequence number and operation
// of its latest collective, as its user defines them (0: none yet).
struct Position {
  uint64_t seq = 0;
  uint8_t op = 0;
};

struct Verdict {
  int rank = -1;  // the lost rank
  How how = How::kExited;
  int seen_by = -1;            // the rank that declared it
  milliseconds silent_for{0};  // how long it had been silent when declared
  Position last;               // its last position heard by seen_by
};

struct Settings {
  milliseconds interval{1000};  // between two heartbeats on a link
  milliseconds timeout{10000};  // how long a watched rank may be unresponsive (Ring::limit)
  // How many timeouts the first successor has until its heartbeat thread first speaks: 3 where
  // a rank's endpoint may be published before its thread starts (dtlaunch --watch exchanges the
  // endpoints first), 1 where the thread starts before its endpoint is published (the DDP
  // runtime), so that a hello is due as soon as the watcher connects.
  int startup_timeouts = 3;
  // How long before the timeout the shell probes a silent rank with a fresh connect(): the
  // probe's result says frozen or unreachable at the deadline.
  milliseconds probe_lead() const;
};

// What a probe (a fresh connect() to the rank's endpoint) found.
enum class Probe : uint8_t { kAccepted, kRefused, kTimedOut };

class Ring {
 public:
  Ring(int self, int world, Settings settings, TimePoint now);

  int self() const noexcept { return self_; }
  int world() const noexcept { return world_; }
  const Settings& settings() const noexcept { return settings_; }

  bool is_lost(int rank) const { return lost_[static_cast<size_t>(rank)]; }
  // The next/previous rank not known to be lost; -1 when this rank is the only one left.
  int successor() const;
  int predecessor() const;
  // The ranks this one sends heartbeats and verdicts to: its predecessor (its watcher) and its
  // successor, each once (one rank for a ring of two).
  std::vector<int> neighbours() const;
  // The rank watched now (the successor), -1 when none.
  int watched() const { return successor(); }

  // --- events, each with the time it happened ---
  // Any message from `rank` (a heartbeat or hello carries its position; a TCP handshake, which a
  // frozen process's kernel completes too, does not). The first successor has
  // Settings::startup_timeouts until it first sends its position.
  void heard(int rank, TimePoint now, std::optional<Position> position = std::nullopt);
  // The connection to or from `rank` closed (EOF, RST): it exited.
  void closed(int rank, TimePoint now);
  // The connection to the watched rank could not be opened.
  void connect_failed(int rank, Probe why, TimePoint now);
  // A probe of a silent rank finished.
  void probed(int rank, Probe result, TimePoint now);
  // `rank` said goodbye: it ended normally. It leaves the ring without a verdict, and so does
  // the successor watched next if its connection closes or is refused before it answers: ranks
  // that end together say goodbye only on the links they have.
  void departed(int rank, TimePoint now);
  // A verdict from another rank. Returns true when it is news here (then pass it on).
  bool receive(const Verdict& v, TimePoint now);

  // The watched rank has been silent long enough for a probe (once per silence): the shell
  // connects to it and reports with probed().
  std::optional<int> probe_due(TimePoint now);
  // Declares the watched rank lost when it has been silent for its limit (timeout + interval
  // after a beat). Call whenever time passes; next_deadline() says when it next matters.
  void tick(TimePoint now);
  TimePoint next_deadline() const;

  // Every verdict known here, in the order learnt.
  const std::vector<Verdict>& verdicts() const noexcept { return verdicts_; }
  // Verdicts not yet handed out (to flood, and to report): this rank's and new received ones.
  std::vector<Verdict> take_news();
  // Whether the watched rank changed since the last call (the shell then connects to it).
  bool take_watch_changed();
  // The last position heard from `rank`.
  Position position_of(int rank) const { return positions_[static_cast<size_t>(rank)]; }

 private:
  void declare(int rank, How how, TimePoint now);
  void watch_next(TimePoint now, bool after_goodbye = false);
  bool record(const Verdict& v);
  milliseconds limit() const;  // the silence allowed to the watched rank now

  int self_;
  int world_;
  Settings settings_;
  std::vector<bool> lost_;
  std::vector<Position> positions_;
  std::vector<Verdict> verdicts_;
  size_t news_from_ = 0;
  // The watch on the successor: since when it counts (half a timeout back after a loss), the last
  // time heard, and the probe.
  int watched_ = -1;
  TimePoint watch_start_{};
  TimePoint last_heard_{};
  bool probe_started_ = false;
  std::optional<Probe> probe_result_;
  bool watch_changed_ = true;
  bool startup_ = true;         // watching the first successor since start-up
  bool answered_ = false;       // the watched rank's heartbeat thread has spoken (a position)
  bool after_goodbye_ = false;  // watched since its predecessor said goodbye
};

// "frozen (silent for 3.1s; its host still accepts connections)", "exited (its connection
// closed)", "unreachable (silent for 3.0s; connect() to it timed out)".
std::string describe_how(const Verdict& v);

}  // namespace dtlaunch::heartbeat
