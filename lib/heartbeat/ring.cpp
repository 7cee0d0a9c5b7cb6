#include "heartbeat/ring.hpp"

#include <algorithm>

#include "core/names.hpp"
#include "core/text.hpp"

namespace dtlaunch::heartbeat {

constexpr core::Named<How> kHowNames[] = {
    {How::kExited, "exited"}, {How::kFrozen, "frozen"}, {How::kUnreachable, "unreachable"}};

const char* to_string(How how) noexcept {
  return core::name_of(how, kHowNames).data();
}

milliseconds Settings::probe_lead() const {
  // Long enough for a handshake across a loaded network, short enough that a slow probe
  // cannot push the verdict past the timeout.
  return std::min(milliseconds(1000), timeout / 4);
}

Ring::Ring(int self, int world, Settings settings, TimePoint now)
    : self_(self),
      world_(world),
      settings_(settings),
      lost_(static_cast<size_t>(world), false),
      positions_(static_cast<size_t>(world)) {
  watch_next(now);
}

int Ring::successor() const {
  for (int i = 1; i < world_; ++i) {
    const int r = (self_ + i) % world_;
    if (!lost_[static_cast<size_t>(r)]) return r;
  }
  return -1;
}

int Ring::predecessor() const {
  for (int i = 1; i < world_; ++i) {
    const int r = (self_ - i + world_) % world_;
    if (!lost_[static_cast<size_t>(r)]) return r;
  }
  return -1;
}

std::vector<int> Ring::neighbours() const {
  std::vector<int> out;
  const int p = predecessor();
  const int s = successor();
  if (p >= 0) out.push_back(p);
  if (s >= 0 && s != p) out.push_back(s);
  return out;
}

void Ring::watch_next(TimePoint now, bool after_goodbye) {
  const int next = successor();
  if (next == watched_ && watched_ >= 0) return;
  after_goodbye_ = after_goodbye;
  // After a loss the new successor has half a timeout to be heard: a live one answers the
  // connection's hello within milliseconds, and two neighbours frozen at once are then both
  // named within 1.5 timeouts instead of 2.
  const bool after_loss = watched_ >= 0;
  watched_ = next;
  watch_start_ = after_loss ? now - settings_.timeout / 2 : now;
  last_heard_ = watch_start_;
  // At start-up the successor's heartbeat thread may start a little later than this one (its
  // rank still finishing init): until it first speaks, it has Settings::startup_timeouts.
  startup_ = !after_loss;
  answered_ = false;
  probe_started_ = false;
  probe_result_.reset();
  watch_changed_ = true;
}

bool Ring::record(const Verdict& v) {
  if (v.rank < 0 || v.rank >= world_ || lost_[static_cast<size_t>(v.rank)]) return false;
  lost_[static_cast<size_t>(v.rank)] = true;
  verdicts_.push_back(v);
  return true;
}

void Ring::declare(int rank, How how, TimePoint now) {
  // Watched because its predecessor said goodbye, and gone before it answered: the ranks are
  // ending together, and its own goodbye went to the links it had, not to this late one. A real
  // exit there still closes its link to its successor, which declares it.
  if (how == How::kExited && rank == watched_ && after_goodbye_ && !answered_) {
    departed(rank, now);
    return;
  }
  Verdict v;
  v.rank = rank;
  v.how = how;
  v.seen_by = self_;
  v.last = positions_[static_cast<size_t>(rank)];
  if (rank == watched_)
    v.silent_for =
        std::chrono::duration_cast<milliseconds>(now - std::max(watch_start_, last_heard_));
  if (!record(v)) return;
  if (rank == watched_) watch_next(now);
}

void Ring::heard(int rank, TimePoint now, std::optional<Position> position) {
  if (rank < 0 || rank >= world_ || lost_[static_cast<size_t>(rank)]) return;
  if (position) positions_[static_cast<size_t>(rank)] = *position;
  if (rank == watched_ && position) answered_ = true;
  if (rank == watched_) {
    last_heard_ = std::max(last_heard_, now);
    probe_started_ = false;
    probe_result_.reset();
  }
}

void Ring::closed(int rank, TimePoint now) {
  if (rank < 0 || rank >= world_ || rank == self_) return;
  declare(rank, How::kExited, now);
}

void Ring::connect_failed(int rank, Probe why, TimePoint now) {
  if (rank != watched_ || why == Probe::kAccepted) return;
  declare(rank, why == Probe::kRefused ? How::kExited : How::kUnreachable, now);
}

void Ring::probed(int rank, Probe result, TimePoint now) {
  if (rank != watched_ || !probe_started_) return;
  if (result == Probe::kRefused) {
    // Nothing listens any more: the process is gone, whatever its connection still says.
    declare(rank, How::kExited, now);
    return;
  }
  probe_result_ = result;
}

void Ring::departed(int rank, TimePoint now) {
  if (rank < 0 || rank >= world_ || rank == self_ || lost_[static_cast<size_t>(rank)]) return;
  lost_[static_cast<size_t>(rank)] = true;
  if (rank == watched_) watch_next(now, true);
}

bool Ring::receive(const Verdict& v, TimePoint now) {
  if (!record(v)) return false;
  if (v.rank == watched_) watch_next(now);
  return true;
}

std::optional<int> Ring::probe_due(TimePoint now) {
  if (watched_ < 0 || probe_started_) return std::nullopt;
  if (now - std::max(watch_start_, last_heard_) < limit() - settings_.probe_lead())
    return std::nullopt;
  probe_started_ = true;
  return watched_;
}

void Ring::tick(TimePoint now) {
  if (watched_ < 0) return;
  if (now - std::max(watch_start_, last_heard_) < limit()) return;
  // No probe answer by the deadline counts as unreachable: a frozen host answers in time.
  declare(watched_, probe_result_ == Probe::kAccepted ? How::kFrozen : How::kUnreachable, now);
}

TimePoint Ring::next_deadline() const {
  if (watched_ < 0) return TimePoint::max();
  const TimePoint base = std::max(watch_start_, last_heard_);
  return probe_started_ ? base + limit() : base + limit() - settings_.probe_lead();
}

milliseconds Ring::limit() const {
  // The timeout is how long a rank may be frozen. Counted from its last beat, the silence also
  // holds the time from that beat to the freeze, up to one interval (issue 35: a 4.5 s freeze
  // with a 5 s timeout and a 1 s interval was declared), so a rank that has beaten gets one
  // interval more, and a freeze is declared within timeout + interval. Before its first beat the
  // silence counts from the watch's start or the handshake, which a freeze does not precede.
  if (answered_) return settings_.timeout + settings_.interval;
  return startup_ ? std::max(1, settings_.startup_timeouts) * settings_.timeout : settings_.timeout;
}

std::vector<Verdict> Ring::take_news() {
  std::vector<Verdict> out(verdicts_.begin() + static_cast<std::ptrdiff_t>(news_from_),
                           verdicts_.end());
  news_from_ = verdicts_.size();
  return out;
}

bool Ring::take_watch_changed() {
  const bool changed = watch_changed_;
  watch_changed_ = false;
  return changed;
}

std::string describe_how(const Verdict& v) {
  switch (v.how) {
    case How::kExited:
      return "exited (its connection closed)";
    case How::kFrozen:
      return "frozen (silent for " + core::duration_text(v.silent_for) +
             "; its host still accepts connections)";
    case How::kUnreachable:
      return "unreachable (silent for " + core::duration_text(v.silent_for) +
             "; no connection to it)";
  }
  return "?";
}

}  // namespace dtlaunch::heartbeat
