#include "heartbeat/simulation.hpp"

#include <algorithm>
#include <memory>
#include <queue>

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

}  // namespace

SimulationResult simulate(const SimulationSetup& setup) {
  const int world = setup.world;
  const TimePoint t0{};
  std::vector<std::unique_ptr<Ring>> rings;
  rings.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    rings.push_back(std::make_unique<Ring>(r, world, setup.settings, t0));
  std::vector<Fault> state(static_cast<size_t>(world), Fault::kNone);
  std::vector<TimePoint> next_beat(static_cast<size_t>(world), t0);
  std::vector<TimePoint> wake_at(static_cast<size_t>(world), TimePoint::max());
  std::vector<uint64_t> received(static_cast<size_t>(world), 0);
  SimulationResult out;
  out.verdicts.resize(static_cast<size_t>(world));
  out.first_verdict_ms.assign(static_cast<size_t>(world), -1);
  out.all_verdicts_ms.assign(static_cast<size_t>(world), -1);
  TimePoint first_fault = TimePoint::max();

  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue;
  uint64_t order = 0;
  auto push = [&](Event e) {
    e.order = order++;
    queue.push(std::move(e));
  };
  const TimePoint end = t0 + setup.duration;
  for (const auto& f : setup.faults) {
    Event e{};
    e.at = t0 + f.at;
    e.kind = Kind::kFault;
    e.to = f.rank;
    e.fault = f.fault;
    push(e);
    first_fault = std::min(first_fault, e.at);
  }
  auto alive = [&](int r) { return state[static_cast<size_t>(r)] == Fault::kNone; };
  auto send = [&](Kind kind, int from, int to, TimePoint now, const Verdict& v = {}) {
    ++out.messages;
    if (!alive(from)) return;
    Event e{};
    e.at = now + setup.latency;
    e.kind = kind;
    e.to = to;
    e.from = from;
    e.verdict = v;
    push(e);
  };
  auto schedule_wake = [&](int r, TimePoint at) {
    if (at >= wake_at[static_cast<size_t>(r)]) return;
    wake_at[static_cast<size_t>(r)] = at;
    Event e{};
    e.at = at;
    e.kind = Kind::kWake;
    e.to = r;
    push(e);
  };
  // What the shell does after any event at rank r: connect, probe, decide, flood, beat.
  auto step = [&](int r, TimePoint now) {
    Ring& ring = *rings[static_cast<size_t>(r)];
    ring.tick(now);
    for (;;) {
      if (ring.take_watch_changed()) {
        const int w = ring.watched();
        if (w >= 0 && state[static_cast<size_t>(w)] == Fault::kExit) {
          Event e{};
          e.at = now + setup.latency;
          e.kind = Kind::kConnectFailed;
          e.to = r;
          e.from = w;
          e.probe = Probe::kRefused;
          push(e);
        }
      }
      const auto news = ring.take_news();
      if (news.empty()) break;
      for (const Verdict& v : news) {
        out.verdicts[static_cast<size_t>(r)].push_back(v);
        out.all_verdicts_ms[static_cast<size_t>(r)] =
            std::chrono::duration_cast<milliseconds>(now - first_fault).count();
        if (out.first_verdict_ms[static_cast<size_t>(r)] < 0)
          out.first_verdict_ms[static_cast<size_t>(r)] =
              std::chrono::duration_cast<milliseconds>(now - first_fault).count();
        for (const int n : ring.neighbours()) send(Kind::kVerdict, r, n, now, v);
      }
    }
    if (const auto p = ring.probe_due(now)) {
      const Fault f = state[static_cast<size_t>(*p)];
      Event e{};
      e.kind = Kind::kProbed;
      e.to = r;
      e.from = *p;
      e.probe = f == Fault::kPartition ? Probe::kTimedOut
                : f == Fault::kExit    ? Probe::kRefused
                                       : Probe::kAccepted;
      e.at = now + (f == Fault::kPartition ? setup.settings.probe_lead() : 2 * setup.latency);
      push(e);
    }
    if (now >= next_beat[static_cast<size_t>(r)]) {
      for (const int n : ring.neighbours()) send(Kind::kBeat, r, n, now);
      next_beat[static_cast<size_t>(r)] = now + setup.settings.interval;
    }
    schedule_wake(r, std::min(next_beat[static_cast<size_t>(r)], ring.next_deadline()));
  };

  for (int r = 0; r < world; ++r) step(r, t0);
  while (!queue.empty() && queue.top().at <= end) {
    const Event e = queue.top();
    queue.pop();
    ++out.events;
    const size_t to = static_cast<size_t>(e.to);
    if (e.kind == Kind::kFault) {
      state[to] = e.fault;
      if (e.fault == Fault::kExit) {
        // The kernel closes its connections: its neighbours see EOF.
        for (int r = 0; r < world; ++r) {
          if (r == e.to || !alive(r)) continue;
          const auto n = rings[static_cast<size_t>(r)]->neighbours();
          if (std::find(n.begin(), n.end(), e.to) == n.end()) continue;
          Event c{};
          c.at = e.at + setup.latency;
          c.kind = Kind::kClosed;
          c.to = r;
          c.from = e.to;
          push(c);
        }
      }
      continue;
    }
    if (!alive(e.to)) continue;
    Ring& ring = *rings[to];
    switch (e.kind) {
      case Kind::kWake:
        if (wake_at[to] != e.at) continue;  // superseded
        wake_at[to] = TimePoint::max();
        break;
      case Kind::kBeat:
        ++received[to];
        ring.heard(e.from, e.at,
                   Position{static_cast<uint64_t>(e.at.time_since_epoch().count() / 1000000), 1});
        break;
      case Kind::kVerdict:
        ++received[to];
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
    step(e.to, e.at);
  }
  out.max_received_by_one = *std::max_element(received.begin(), received.end());
  return out;
}

}  // namespace dtlaunch::heartbeat
