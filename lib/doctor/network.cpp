#include "doctor/network.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/socket.hpp"
#include "core/text.hpp"

// The launcher's one libm symbol that glibc 2.29 versioned anew (a faster pow, same results on
// these finite inputs): bound to the older version, the release binary's glibc floor is 2.28
// (RHEL 8) instead of 2.29 (scripts/package.sh checks it).
#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver pow,pow@GLIBC_2.2.5");
#endif

namespace dtlaunch::doctor {
namespace {

constexpr std::string_view kHello = "DTLNET1\n";
constexpr std::uint64_t kMaxTransfer = 1ull << 30;
constexpr std::size_t kMaxAnswering = 64;  // connections answered at once; more are closed
constexpr std::size_t kChunk = 1 << 20;
const std::vector<char>& zeros() {
  static const std::vector<char> buffer(kChunk, 0);
  return buffer;
}

using Ms = std::chrono::milliseconds;

void set_timeouts(int fd, Clock::duration left) {
  const auto us = std::max<std::int64_t>(
      1000, std::chrono::duration_cast<std::chrono::microseconds>(left).count());
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Blocking I/O bounded by the socket timeouts; `done` counts what went through.
bool send_bytes(int fd, const char* data, std::uint64_t n, std::uint64_t& done) {
  while (done < n) {
    const ssize_t k =
        ::send(fd, data ? data + done : zeros().data(),
               static_cast<std::size_t>(std::min<std::uint64_t>(n - done, kChunk)), MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<std::uint64_t>(k);
  }
  return true;
}

bool recv_bytes(int fd, char* into, std::uint64_t n, std::uint64_t& done) {
  static thread_local std::vector<char> sink(kChunk);
  while (done < n) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, kChunk));
    const ssize_t k = ::recv(fd, into ? into + done : sink.data(), want, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<std::uint64_t>(k);
  }
  return true;
}

bool send_all_bytes(int fd, std::string_view data) {
  std::uint64_t done = 0;
  return send_bytes(fd, data.data(), data.size(), done);
}

bool recv_exact(int fd, char* into, std::size_t n) {
  std::uint64_t done = 0;
  return recv_bytes(fd, into, n, done);
}

std::string command(char what, std::uint64_t n) {
  std::string out(9, '\0');
  out[0] = what;
  for (int i = 0; i < 8; ++i) out[1 + i] = static_cast<char>(n >> (56 - 8 * i));
  return out;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Connects to address:port before `end`; -1 and `error` when it cannot.
int connect_to(const std::string& address, std::uint16_t port, Clock::time_point end,
               std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    error = "cannot resolve " + address + ": " + ::gai_strerror(rc);
    return -1;
  }
  std::string why = "no address";
  int connected = -1;
  for (const addrinfo* a = found; a && connected < 0; a = a->ai_next) {
    const int fd = core::connect_until(*a, end, std::chrono::milliseconds::max());
    if (fd < 0) {
      why = "cannot connect to " + address + ":" + std::to_string(port) + ": " + std::strerror(-fd);
      continue;
    }
    ::fcntl(fd, F_SETFL, 0);  // blocking, bounded by the socket timeouts
    connected = fd;
  }
  ::freeaddrinfo(found);
  if (connected < 0) error = why;  // untouched on success
  return connected;
}

// One direction's throughput: transfers of doubling size until the next would pass `phase_end`.
// Each is timed by its receiver, from its first byte (the command, for an upload) to its last,
// so that neither the command nor the acknowledgement crosses the other direction, which may be
// the slow one (a full queue on the peer's side delays its 'A' by up to tbf's latency). The best
// rate of the transfers that took 2 ms or more is kept (noise only ever lowers a rate; a shorter
// one measures little but the socket buffers). -1 when nothing was measured; `broken` when a
// transfer did not finish (the connection is then out of step).
double measure(int fd, char direction, Clock::time_point phase_end, bool& broken) {
  double best = -1, last = -1;
  std::uint64_t n = 64 * 1024;
  while (Clock::now() < phase_end) {
    set_timeouts(fd, phase_end - Clock::now() + Ms(200));
    const auto t0 = Clock::now();
    std::uint64_t done = 0;
    double seconds = 0;
    bool ok = send_all_bytes(fd, command(direction, n));
    if (ok && direction == 'U') {
      unsigned char ack[9] = {};
      ok = send_bytes(fd, nullptr, n, done) &&
           recv_exact(fd, reinterpret_cast<char*>(ack), sizeof ack) && ack[0] == 'A';
      std::uint64_t ns = 0;
      for (int i = 1; i < 9; ++i) ns = ns << 8 | ack[i];
      seconds = static_cast<double>(ns) / 1e9;
    } else if (ok) {
      char first = 0;  // the clock starts when the first byte is in
      ok = n > 0 && recv_exact(fd, &first, 1);
      const auto t1 = Clock::now();
      done = 1;
      ok = ok && recv_bytes(fd, nullptr, n, done);
      seconds = seconds_since(t1);
    }
    const double elapsed = std::max(seconds_since(t0), 1e-6);
    if (!ok) {
      broken = true;  // what went through before the deadline is a lower bound of the rate
      return std::max(best, static_cast<double>(done) / elapsed);
    }
    last = static_cast<double>(n) / std::max(seconds, 1e-6);
    if (seconds >= 0.002) best = std::max(best, last);
    if (Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(2.2 * elapsed)) >
        phase_end)
      break;
    n = std::min(n * 2, kMaxTransfer);
  }
  return best >= 0 ? best : last;
}

// A connection to the peer's agent, greeted; -1 and `error` when it cannot be made.
int open_test(const NetworkPeer& peer, Clock::time_point end, std::string& error) {
  const int fd = connect_to(peer.address, peer.port, end, error);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeouts(fd, end - Clock::now());
  if (send_all_bytes(fd, kHello)) return fd;
  error = peer.address + " did not answer";
  ::close(fd);
  return -1;
}

LinkResult test_peer(std::uint32_t from, const NetworkPeer& peer, Clock::time_point start,
                     Clock::time_point end) {
  LinkResult result{from, peer.node, 0, 0, 0, ""};
  int fd = open_test(peer, end, result.error);
  if (fd < 0) return result;  // zero rates: a link that does not work is as slow as can be
  const auto span = end - start;
  std::vector<double> rtts;
  bool broken = false;
  const auto pings_end = start + span / 10;
  while (!broken && rtts.size() < 16 && (rtts.size() < 3 || Clock::now() < pings_end)) {
    const auto t0 = Clock::now();
    char echo = 0;
    if (!send_all_bytes(fd, "P") || !recv_exact(fd, &echo, 1) || echo != 'P')
      broken = true;
    else
      rtts.push_back(seconds_since(t0) * 1e6);
  }
  if (!rtts.empty()) result.rtt_us = robust_spread(rtts).median;
  result.up_bytes_per_s = broken ? -1 : measure(fd, 'U', start + span * 11 / 20, broken);
  if (broken && !rtts.empty()) {
    // An upload that overran its phase (a throttled sender whose queue also carries the
    // acknowledgements of other tests) leaves the connection out of step. The other direction
    // is still measured, on a fresh connection: without it the job's median is taken over
    // fewer healthy directions, and the slow node can go unnamed (the Slurm scenario did).
    ::close(fd);
    std::string ignored;
    fd = open_test(peer, end, ignored);
    broken = fd < 0;
  }
  result.down_bytes_per_s = broken ? -1 : measure(fd, 'D', end - span / 20, broken);
  if (!broken) send_all_bytes(fd, "Q");
  if (rtts.empty() && result.up_bytes_per_s < 0) result.error = peer.address + " did not answer";
  if (fd >= 0) ::close(fd);
  return result;
}

std::string rate_text(double bytes_per_s) {
  char text[32];
  if (bytes_per_s >= 1e9)
    std::snprintf(text, sizeof text, "%.2f GB/s", bytes_per_s / 1e9);
  else if (bytes_per_s >= 1e6)
    std::snprintf(text, sizeof text, "%.1f MB/s", bytes_per_s / 1e6);
  else
    std::snprintf(text, sizeof text, "%.0f kB/s", bytes_per_s / 1e3);
  return text;
}

std::string rtt_text(double us) {
  return core::duration_text(std::chrono::duration<double, std::micro>(us));
}

std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  while (!line.empty()) {
    const std::size_t blank = line.find(' ');
    if (blank != 0) words.push_back(line.substr(0, blank));
    line = blank == std::string_view::npos ? std::string_view{} : line.substr(blank + 1);
  }
  return words;
}

template <class OnLine>
void for_each_line(std::string_view text, OnLine on_line) {
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (!line.empty()) on_line(line);
  }
}

std::uint64_t number_of(std::string_view word, std::uint64_t max, std::string_view what) {
  const auto n = core::parse_uint(word, max);
  if (!n)
    throw core::Error(core::ExitCode::kBadInput, "doctor network " + std::string(what) + ": '" +
                                                     core::excerpt(word) + "' is not a number");
  return *n;
}

double rate_of(std::string_view word) {
  if (word == "-") return -1;
  return static_cast<double>(number_of(word, UINT64_MAX, "result"));
}

}  // namespace

Spread robust_spread(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    const std::size_t mid = v.size() / 2;
    return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  };
  s.median = median(values);
  for (double& v : values) v = std::abs(v - s.median);
  s.sigma = 1.4826 * median(values);
  return s;
}

std::vector<std::vector<std::uint32_t>> plan_peers(std::uint32_t n, std::uint32_t random_peers) {
  std::vector<std::vector<std::uint32_t>> peers(n);
  if (n < 2) return peers;
  std::set<std::pair<std::uint32_t, std::uint32_t>> paired;
  auto pair_of = [](std::uint32_t a, std::uint32_t b) {
    return std::pair<std::uint32_t, std::uint32_t>(std::min(a, b), std::max(a, b));
  };
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t next = (i + 1) % n;
    if (paired.insert(pair_of(i, next)).second) peers[i].push_back(next);
  }
  std::mt19937_64 random(0x5eed'd0c7'0000ull + n);  // fixed: the same job tests the same pairs
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t tries = 0, added = 0; added < random_peers && tries < 8 * random_peers;
         ++tries) {
      const auto j = static_cast<std::uint32_t>(random() % n);
      if (j == i || !paired.insert(pair_of(i, j)).second) continue;
      peers[i].push_back(j);
      ++added;
    }
  return peers;
}

std::string encode_plan(const NetworkPlan& plan) {
  std::string out =
      "node " + std::to_string(plan.node) + "\nslot_ms " + std::to_string(plan.slot.count()) + "\n";
  for (const NetworkPeer& p : plan.peers)
    out += "peer " + std::to_string(p.node) + " " + std::to_string(p.port) + " " + p.address + "\n";
  return out;
}

NetworkPlan decode_plan(std::string_view text) {
  NetworkPlan plan;
  for_each_line(text, [&](std::string_view line) {
    const auto w = words_of(line);
    if (w.size() == 2 && w[0] == "node") {
      plan.node = static_cast<std::uint32_t>(number_of(w[1], UINT32_MAX, "plan"));
    } else if (w.size() == 2 && w[0] == "slot_ms") {
      plan.slot = Ms(number_of(w[1], 600000, "plan"));
    } else if (w.size() == 4 && w[0] == "peer") {
      plan.peers.push_back({static_cast<std::uint32_t>(number_of(w[1], UINT32_MAX, "plan")),
                            std::string(w[3]),
                            static_cast<std::uint16_t>(number_of(w[2], 65535, "plan"))});
    } else {
      throw core::Error(core::ExitCode::kBadInput,
                        "doctor network plan: line '" + core::excerpt(line) + "'");
    }
  });
  if (plan.peers.size() > 64)
    throw core::Error(core::ExitCode::kBadInput, "doctor network plan: more than 64 peers");
  return plan;
}

std::string encode_results(const std::vector<LinkResult>& results) {
  std::string out;
  auto rate = [](double r) {
    return r < 0 ? std::string("-") : std::to_string(static_cast<std::uint64_t>(r));
  };
  for (const LinkResult& r : results)
    out += "link " + std::to_string(r.from) + " " + std::to_string(r.to) + " " +
           std::to_string(static_cast<std::uint64_t>(r.rtt_us)) + " " + rate(r.up_bytes_per_s) +
           " " + rate(r.down_bytes_per_s) + " " + core::excerpt(r.error, 200) + "\n";
  return out;
}

std::vector<LinkResult> decode_results(std::string_view text) {
  std::vector<LinkResult> results;
  for_each_line(text, [&](std::string_view line) {
    const auto w = words_of(line);
    if (w.size() < 6 || w[0] != "link" || results.size() >= 64)
      throw core::Error(core::ExitCode::kBadInput,
                        "doctor network result: line '" + core::excerpt(line) + "'");
    LinkResult r;
    r.from = static_cast<std::uint32_t>(number_of(w[1], UINT32_MAX, "result"));
    r.to = static_cast<std::uint32_t>(number_of(w[2], UINT32_MAX, "result"));
    r.rtt_us = static_cast<double>(number_of(w[3], UINT64_MAX, "result"));
    r.up_bytes_per_s = rate_of(w[4]);
    r.down_bytes_per_s = rate_of(w[5]);
    const auto after = static_cast<std::size_t>(w[5].data() - line.data()) + w[5].size();
    if (after + 1 < line.size()) r.error = std::string(line.substr(after + 1));
    results.push_back(std::move(r));
  });
  return results;
}

namespace {

struct Directed {
  std::uint32_t from, to;
  double rate;
};

// The results sorted out: the rates of each direction, the timed links, and per node how many
// tests tried it and could not connect. A test that could not connect says nothing of a rate:
// it counts against the peer it tried, which a node that checked in but takes no connection is.
struct Measurements {
  explicit Measurements(std::size_t n) : tested(n), refused(n), first_error(n) {}
  std::vector<Directed> directed;
  std::vector<LinkResult> timed;
  std::vector<std::size_t> tested, refused;
  std::vector<std::string> first_error;
};

Measurements sort_out(const std::vector<LinkResult>& results, std::size_t n) {
  Measurements m(n);
  for (const LinkResult& r : results) {
    if (r.from >= n || r.to >= n) continue;
    ++m.tested[r.to];
    if (!r.error.empty()) {
      if (m.refused[r.to]++ == 0) m.first_error[r.to] = r.error;
      continue;
    }
    if (r.up_bytes_per_s >= 0) m.directed.push_back({r.from, r.to, r.up_bytes_per_s});
    if (r.down_bytes_per_s >= 0) m.directed.push_back({r.to, r.from, r.down_bytes_per_s});
    if (r.rtt_us > 0) m.timed.push_back(r);
  }
  return m;
}

// In logarithms: rates and delays vary by factors, and a factor is what makes a link slow.
double log_of(double v) {
  return std::log10(std::max(v, 1.0));
}

// One side of every node's links (what it sends, what it receives, or its round trips): the
// node's median, in logarithms, and whether it is an outlier among the nodes' medians. A node is
// judged by the median of its links, and the job by the median of its nodes, so that a slow node
// weighs as one node however many links it is on: with three nodes, four of the six directions
// touch any one node, and a throttled sender slows what it receives too (its acknowledgements
// queue behind its own data), which dragged a median of directions down to its level.
struct Side {
  std::vector<std::optional<double>> node_log;  // none: nothing measured on this side
  std::vector<bool> slow;
  double median = 0;  // the job's, in the side's unit
};

Side judge_side(const std::vector<std::vector<double>>& per_node, bool higher_is_slow, double k,
                double min_ratio, double max_ratio, double floor) {
  Side side;
  std::vector<double> medians;
  for (const auto& values : per_node) {
    std::vector<double> logs;
    for (double v : values) logs.push_back(log_of(v));
    side.node_log.push_back(logs.empty() ? std::nullopt
                                         : std::optional(robust_spread(logs).median));
    if (side.node_log.back()) medians.push_back(*side.node_log.back());
  }
  const Spread job = robust_spread(medians);
  side.median = std::pow(10.0, job.median);
  // The MAD widens the margin on a noisy run, but only so far: with few nodes one slow node
  // inflates it, and a node 50x slower than the median is never noise.
  const double margin = std::clamp(k * job.sigma, std::log10(min_ratio), std::log10(max_ratio));
  for (const auto& node : side.node_log) {
    const bool beyond =
        node && (higher_is_slow ? *node > job.median + margin : *node < job.median - margin);
    side.slow.push_back(beyond && std::abs(std::pow(10.0, *node) - side.median) > floor);
  }
  return side;
}

struct Sides {
  Side sent, received, round_trips;
};

Sides judge_sides(const Measurements& m, const NetworkLimits& limits, std::size_t n) {
  std::vector<std::vector<double>> sent(n), received(n), round_trips(n);
  for (const Directed& d : m.directed) {
    sent[d.from].push_back(d.rate);
    received[d.to].push_back(d.rate);
  }
  for (const LinkResult& r : m.timed)
    for (std::uint32_t node : {r.from, r.to}) round_trips[node].push_back(r.rtt_us);
  return {judge_side(sent, false, limits.k, limits.min_rate_ratio, limits.max_rate_ratio, 0),
          judge_side(received, false, limits.k, limits.min_rate_ratio, limits.max_rate_ratio, 0),
          judge_side(round_trips, true, limits.k, limits.min_rtt_ratio, limits.max_rtt_ratio,
                     limits.latency_floor_us)};
}

// Most tests failing says more about the network than about any node: a firewall that lets
// only the rendezvous port through, say. Blaming every node would exclude the whole job.
std::optional<Problem> most_tests_failed(const Measurements& m) {
  const std::size_t all_tests = std::accumulate(m.tested.begin(), m.tested.end(), std::size_t{0});
  const std::size_t all_refused =
      std::accumulate(m.refused.begin(), m.refused.end(), std::size_t{0});
  if (all_tests == 0 || 2 * all_refused <= all_tests) return std::nullopt;
  const auto first = std::find_if(m.first_error.begin(), m.first_error.end(),
                                  [](const std::string& e) { return !e.empty(); });
  return Problem{"network-test-failed",
                 Severity::kWarning,
                 {},
                 {},
                 std::to_string(all_refused) + " of the " + std::to_string(all_tests) +
                     " network tests could not connect (" + core::excerpt(*first, 120) +
                     "): do the nodes accept TCP connections on ports other than the "
                     "rendezvous port? No node is blamed"};
}

// What is slow about node i, each against the job's median; empty when nothing is.
std::vector<std::string> slow_sides(const Sides& s, const Measurements& m, std::size_t i) {
  std::vector<std::string> why;
  auto at = [&](const Side& side) { return std::pow(10.0, *side.node_log[i]); };
  if (s.sent.slow[i])
    why.push_back("sends at " + rate_text(at(s.sent)) + " against the job's " +
                  rate_text(s.sent.median));
  if (s.received.slow[i])
    why.push_back("receives at " + rate_text(at(s.received)) + " against the job's " +
                  rate_text(s.received.median));
  if (s.round_trips.slow[i])
    why.push_back("answers in " + rtt_text(at(s.round_trips)) + " against the job's " +
                  rtt_text(s.round_trips.median));
  if (2 * m.refused[i] > m.tested[i] && m.tested[i] > 0)
    why.push_back("cannot be reached by " + std::to_string(m.refused[i]) + " of the " +
                  std::to_string(m.tested[i]) + " peers that tested it (" +
                  core::excerpt(m.first_error[i], 120) + ")");
  return why;
}

}  // namespace

std::vector<Problem> judge_network(const std::vector<LinkResult>& results,
                                   const std::vector<std::string>& hosts,
                                   const std::vector<std::uint32_t>& ranks,
                                   const NetworkLimits& limits) {
  const std::size_t n = hosts.size();
  if (n < limits.min_nodes) return {};
  const Measurements m = sort_out(results, n);
  if (auto failed = most_tests_failed(m)) return {*failed};
  const Sides sides = judge_sides(m, limits, n);
  std::vector<Problem> problems;
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<std::string> why = slow_sides(sides, m, i);
    if (why.empty()) continue;
    std::string message = core::excerpt(hosts[i], 60) + " ";
    for (std::size_t k = 0; k < why.size(); ++k)
      message += (k == 0 ? "" : k + 1 == why.size() ? " and " : ", ") + why[k];
    message +=
        " (medians: the node's over its links, the job's over its nodes): a degraded "
        "link, NIC or interface";
    problems.push_back({"slow-network", Severity::kError, {ranks[i]}, {hosts[i]}, message});
  }
  return problems;
}

std::string summarize_network(const std::vector<LinkResult>& results, std::size_t nodes) {
  std::vector<double> rates, rtts;
  std::size_t failed = 0;
  for (const LinkResult& r : results) {
    if (!r.error.empty()) ++failed;
    for (double rate : {r.up_bytes_per_s, r.down_bytes_per_s})
      if (r.error.empty() && rate >= 0) rates.push_back(rate);
    if (r.rtt_us > 0) rtts.push_back(r.rtt_us);
  }
  if (results.empty()) return {};
  std::string out =
      std::to_string(results.size()) + " tests between " + std::to_string(nodes) + " nodes";
  if (!rates.empty()) {
    const auto [low, high] = std::minmax_element(rates.begin(), rates.end());
    out += ", throughput median " + rate_text(robust_spread(rates).median) + " (" +
           rate_text(*low) + " to " + rate_text(*high) + ")";
  }
  if (!rtts.empty()) out += ", round trip median " + rtt_text(robust_spread(rtts).median);
  if (failed) out += ", " + std::to_string(failed) + " could not connect";
  return out;
}

std::unique_ptr<NetworkAgent> NetworkAgent::start() {
  for (int family : {AF_INET6, AF_INET}) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage address{};
    socklen_t length = 0;
    if (family == AF_INET6) {
      const int zero = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&address);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      length = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&address);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      length = sizeof *a;
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ::close(fd);
      continue;
    }
    const std::uint16_t port =
        ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                 : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    std::unique_ptr<NetworkAgent> agent(new NetworkAgent(fd, port));
    agent->server_ = std::thread([a = agent.get()] { a->serve(); });
    return agent;
  }
  return nullptr;
}

NetworkAgent::NetworkAgent(int listener, std::uint16_t port) : listener_(listener), port_(port) {}

NetworkAgent::~NetworkAgent() {
  stopping_ = true;
  ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
  if (server_.joinable()) server_.join();
  {
    const std::lock_guard lock(mutex_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : answering_) t.join();
  ::close(listener_);
}

void NetworkAgent::serve() {
  while (!stopping_) {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    const std::lock_guard lock(mutex_);
    // At most kMaxAnswering at once, and 16x that in all: each answer's thread is joined only
    // when the agent ends, and a stranger connecting in a loop must not pile them up.
    if (stopping_ || open_.size() >= kMaxAnswering || answering_.size() >= 16 * kMaxAnswering) {
      ::close(fd);
      continue;
    }
    open_.push_back(fd);
    answering_.emplace_back([this, fd] { answer(fd); });
  }
}

void NetworkAgent::answer(int fd) {
  // A peer that stalls is dropped after 10 s; one that sends more than 16 GiB is dropped too.
  set_timeouts(fd, std::chrono::seconds(10));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char hello[8];
  std::uint64_t total = 0;
  if (recv_exact(fd, hello, sizeof hello) && std::string_view(hello, 8) == kHello) {
    for (;;) {
      char what = 0;
      if (!recv_exact(fd, &what, 1)) break;
      if (what == 'P') {
        if (!send_all_bytes(fd, "P")) break;
        continue;
      }
      if (what != 'U' && what != 'D') break;
      unsigned char size[8];
      if (!recv_exact(fd, reinterpret_cast<char*>(size), 8)) break;
      std::uint64_t n = 0;
      for (unsigned char b : size) n = n << 8 | b;
      total += n;
      if (n > kMaxTransfer || total > 16 * kMaxTransfer) break;
      std::uint64_t done = 0;
      if (what == 'D') {
        if (!send_bytes(fd, nullptr, n, done)) break;
        continue;
      }
      // An upload is timed here, from its command to its last byte: 'A' and the nanoseconds.
      const auto t0 = Clock::now();
      if (!recv_bytes(fd, nullptr, n, done)) break;
      const auto ns = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
      if (!send_all_bytes(fd, command('A', ns))) break;
    }
  }
  const std::lock_guard lock(mutex_);
  open_.erase(std::find(open_.begin(), open_.end(), fd));
  ::close(fd);
}

std::vector<LinkResult> NetworkAgent::run(const NetworkPlan& plan, Clock::time_point end) const {
  std::vector<LinkResult> results;
  auto start = Clock::now();
  for (const NetworkPeer& peer : plan.peers) {
    const auto slot_end = std::min(start + plan.slot, end);
    if (slot_end <= Clock::now()) break;
    results.push_back(test_peer(plan.node, peer, start, slot_end));
    start = slot_end;
    // Every node keeps to the same slots, so that the tests of one round run together.
    std::this_thread::sleep_until(start);
  }
  return results;
}

}  // namespace dtlaunch::doctor
