#include "heartbeat/simulation.hpp"

#include <algorithm>
#include <memory>
#include <queue>
#include <utility>

namespace dtlaunch::heartbeat {
namespace {

enum class Kind : uint8_t { kWake, kBeat, kVerdict, kClosed, kProbed, kConnectFailed, kFault };

struct Event {
  TimePoint at;
  uint64_t order;  // FIFO among equal times
  Kind kind;
  int to;
  int from;
  Verdict verdict;
  Probe probe = Probe::kAccepted;
  Fault fault = Fault::kNone;
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
};

// The ring's state and the event queue, one step per kind of event.
class Simulation {
 public:
  explicit Simulation(const SimulationSetup& setup)
      : setup_(setup),
        world_(setup.world),
        end_(TimePoint{} + setup.duration),
        state_(static_cast<size_t>(world_), Fault::kNone),
        next_beat_(static_cast<size_t>(world_), TimePoint{}),
        wake_at_(static_cast<size_t>(world_), TimePoint::max()),
        received_(static_cast<size_t>(world_), 0),
        held_(static_cast<size_t>(world_)) {
    rings_.reserve(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r)
      rings_.push_back(std::make_unique<Ring>(r, world_, setup.settings, TimePoint{}));
    out_.verdicts.resize(static_cast<size_t>(world_));
    out_.first_verdict_ms.assign(static_cast<size_t>(world_), -1);
    out_.all_verdicts_ms.assign(static_cast<size_t>(world_), -1);
    for (const auto& f : setup.faults) {
      Event e{};
      e.at = TimePoint{} + f.at;
      e.kind = Kind::kFault;
      e.to = f.rank;
      e.fault = f.fault;
      push(e);
      if (f.fault != Fault::kResume) first_fault_ = std::min(first_fault_, e.at);
    }
  }

  SimulationResult run() {
    for (int r = 0; r < world_; ++r) step(r, TimePoint{});
    while (!queue_.empty() && queue_.top().at <= end_) {
      const Event e = queue_.top();
      queue_.pop();
      ++out_.events;
      if (e.kind == Kind::kFault) {
        inject(e);
        continue;
      }
      if (!alive(e.to)) {
        // A frozen rank's kernel keeps what comes in for it; a cut-off or dead one's is lost.
        if (state_[static_cast<size_t>(e.to)] == Fault::kFreeze && e.kind != Kind::kWake)
          held_[static_cast<size_t>(e.to)].push_back(e);
        continue;
      }
      if (!deliver(e)) continue;
      step(e.to, e.at);
    }
    out_.max_received_by_one = *std::max_element(received_.begin(), received_.end());
    return std::move(out_);
  }

 private:
  void push(Event e) {
    e.order = order_++;
    queue_.push(std::move(e));
  }
  bool alive(int r) const { return state_[static_cast<size_t>(r)] == Fault::kNone; }
  void send(Kind kind, int from, int to, TimePoint now, const Verdict& v = {}) {
    ++out_.messages;
    if (!alive(from)) return;
    Event e{};
    e.at = now + setup_.latency;
    e.kind = kind;
    e.to = to;
    e.from = from;
    e.verdict = v;
    push(e);
  }
  void schedule_wake(int r, TimePoint at) {
    if (at >= wake_at_[static_cast<size_t>(r)]) return;
    wake_at_[static_cast<size_t>(r)] = at;
    Event e{};
    e.at = at;
    e.kind = Kind::kWake;
    e.to = r;
    push(e);
  }

  void inject(const Event& e) {
    if (e.fault == Fault::kResume) {
      // As a thawed process: it reads what its sockets held, then looks at the time (its
      // wake-ups were dropped meanwhile) and beats, overdue.
      const size_t r = static_cast<size_t>(e.to);
      state_[r] = Fault::kNone;
      wake_at_[r] = TimePoint::max();
      for (Event held : std::exchange(held_[r], {})) {
        held.at = e.at;
        deliver(held);
      }
      step(e.to, e.at);
      return;
    }
    state_[static_cast<size_t>(e.to)] = e.fault;
    if (e.fault != Fault::kExit) return;
    // The kernel closes its connections: its neighbours see EOF.
    for (int r = 0; r < world_; ++r) {
      if (r == e.to || !alive(r)) continue;
      const auto n = rings_[static_cast<size_t>(r)]->neighbours();
      if (std::find(n.begin(), n.end(), e.to) == n.end()) continue;
      Event c{};
      c.at = e.at + setup_.latency;
      c.kind = Kind::kClosed;
      c.to = r;
      c.from = e.to;
      push(c);
    }
  }

  // Hands an event to its rank's core; false for a wake-up that was superseded.
  bool deliver(const Event& e) {
    const size_t to = static_cast<size_t>(e.to);
    Ring& ring = *rings_[to];
    switch (e.kind) {
      case Kind::kWake:
        if (wake_at_[to] != e.at) return false;
        wake_at_[to] = TimePoint::max();
        break;
      case Kind::kBeat:
        ++received_[to];
        ring.heard(e.from, e.at,
                   Position{static_cast<uint64_t>(e.at.time_since_epoch().count() / 1000000), 1});
        break;
      case Kind::kVerdict:
        ++received_[to];
        ring.heard(e.from, e.at);
        ring.receive(e.verdict, e.at);
        break;
      case Kind::kClosed:
        ring.closed(e.from, e.at);
        break;
      case Kind::kProbed:
        ring.probed(e.from, e.probe, e.at);
        break;
      case Kind::kConnectFailed:
        ring.connect_failed(e.from, e.probe, e.at);
        break;
      case Kind::kFault:
        break;
    }
    return true;
  }

  // A newly watched rank that has exited refuses the connection.
  void connect_to_watched(int r, TimePoint now) {
    Ring& ring = *rings_[static_cast<size_t>(r)];
    if (!ring.take_watch_changed()) return;
    const int w = ring.watched();
    if (w < 0 || state_[static_cast<size_t>(w)] != Fault::kExit) return;
    Event e{};
    e.at = now + setup_.latency;
    e.kind = Kind::kConnectFailed;
    e.to = r;
    e.from = w;
    e.probe = Probe::kRefused;
    push(e);
  }

  // Records and floods rank r's new verdicts; false when there were none.
  bool spread_news(int r, TimePoint now) {
    Ring& ring = *rings_[static_cast<size_t>(r)];
    const auto news = ring.take_news();
    const int64_t since_fault =
        std::chrono::duration_cast<milliseconds>(now - first_fault_).count();
    for (const Verdict& v : news) {
      out_.verdicts[static_cast<size_t>(r)].push_back(v);
      out_.all_verdicts_ms[static_cast<size_t>(r)] = since_fault;
      if (out_.first_verdict_ms[static_cast<size_t>(r)] < 0)
        out_.first_verdict_ms[static_cast<size_t>(r)] = since_fault;
      for (const int n : ring.neighbours()) send(Kind::kVerdict, r, n, now, v);
    }
    return !news.empty();
  }

  void probe(int r, TimePoint now) {
    const auto p = rings_[static_cast<size_t>(r)]->probe_due(now);
    if (!p) return;
    const Fault f = state_[static_cast<size_t>(*p)];
    Event e{};
    e.kind = Kind::kProbed;
    e.to = r;
    e.from = *p;
    e.probe = f == Fault::kPartition ? Probe::kTimedOut
              : f == Fault::kExit    ? Probe::kRefused
                                     : Probe::kAccepted;
    e.at = now + (f == Fault::kPartition ? setup_.settings.probe_lead() : 2 * setup_.latency);
    push(e);
  }

  // What the shell does after any event at rank r: connect, probe, decide, flood, beat.
  void step(int r, TimePoint now) {
    Ring& ring = *rings_[static_cast<size_t>(r)];
    ring.tick(now);
    do connect_to_watched(r, now);
    while (spread_news(r, now));
    probe(r, now);
    if (now >= next_beat_[static_cast<size_t>(r)]) {
      for (const int n : ring.neighbours()) send(Kind::kBeat, r, n, now);
      next_beat_[static_cast<size_t>(r)] = now + setup_.settings.interval;
    }
    schedule_wake(r, std::min(next_beat_[static_cast<size_t>(r)], ring.next_deadline()));
  }

  const SimulationSetup& setup_;
  const int world_;
  const TimePoint end_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<Fault> state_;
  std::vector<TimePoint> next_beat_;
  std::vector<TimePoint> wake_at_;
  std::vector<uint64_t> received_;
  std::vector<std::vector<Event>> held_;  // what came for a frozen rank, delivered at its resume
  SimulationResult out_;
  TimePoint first_fault_ = TimePoint::max();
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  uint64_t order_ = 0;
};

}  // namespace

SimulationResult simulate(const SimulationSetup& setup) {
  return Simulation(setup).run();
}

}  // namespace dtlaunch::heartbeat
