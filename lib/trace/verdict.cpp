// Merging rank files into the verdict. The straggler statistics follow Horovod's stall inspector
// in spirit (who came last) but weigh by time: for each collective every present rank entered,
// the last rank to enter "made the others wait" the gap to the second last. A rank is named only
// when it made them wait 1 ms or more in most such collectives, for a sizeable share of the
// span, far beyond the other ranks (median and MAD): a healthy run, even on a loaded machine,
// spreads those waits over every rank and names nobody.
#include "trace/verdict.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/names.hpp"
#include "core/text.hpp"

namespace dtlaunch::trace {

using core::json_quote;

namespace {

// What differs between two signatures: "operation", "dtype", "shape", "root".
std::string differences(const Entry& a, const Entry& b) {
  std::vector<std::string> what;
  if (a.op != b.op) what.push_back("operation");
  if (a.op == b.op && std::string_view(a.dtype) != b.dtype) what.push_back("dtype");
  if (a.op == b.op && (a.numel != b.numel || !flight::same_shape(a, b))) what.push_back("shape");
  if (a.op == b.op && a.root != b.root) what.push_back("root");
  return core::join(what, ", ");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

// How late the last rank must enter a collective for its lateness to count (a straggler's).
constexpr double kSignificantMs = 1.0;
// In how many collectives a rank must come that late to be named. A loaded machine can hold one
// rank back a few ms in a handful of collectives in a row: with 5, a healthy 4-rank run of 181
// collectives named rank 2 (6 of them, 3.9 ms median, 14 % of a 177 ms span) in a CI run.
constexpr size_t kMinLateCollectives = 10;

std::string seconds_text(double seconds) {
  return core::duration_text(std::chrono::duration<double>(seconds));
}
std::string ms_text(double ms) {
  return core::duration_text(std::chrono::duration<double, std::milli>(ms));
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return core::compact_ranges(std::vector<uint32_t>(ranks.begin(), ranks.end()), 8);
}

}  // namespace

std::vector<int> Findings::missing() const {
  std::vector<int> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (!ranks[r].present) out.push_back(static_cast<int>(r));
  return out;
}

bool Findings::healthy() const {
  return missing().empty() && (divergent_seq == 0 || !divergence_stalled) &&
         mismatched_collectives == 0 && stragglers.empty();
}

Merger::Merger(std::string run_id, int attempt, int world_size) {
  v_.run_id = std::move(run_id);
  v_.attempt = attempt;
  v_.world_size = world_size;
  v_.ranks.resize(static_cast<size_t>(world_size));
  late_ms_.resize(static_cast<size_t>(world_size));
}

void Merger::add(const std::string& file, const RankFile& f) {
  const Header& h = f.header;
  if (h.rank < 0 || h.rank >= v_.world_size) {
    skip(file, "rank " + std::to_string(h.rank) + " is outside the run's world size " +
                   std::to_string(v_.world_size));
    return;
  }
  RankSummary& rs = v_.ranks[static_cast<size_t>(h.rank)];
  const int64_t offset = h.clock_offset_us.value_or(0);
  rs.present = true;
  rs.file = file;
  rs.host = h.host;
  rs.kind = h.kind;
  rs.reason = h.reason;
  rs.local_rank = h.local_rank;
  rs.started =
      std::max<uint64_t>(h.collectives_started, f.entries.empty() ? 0 : f.entries.back().seq);
  rs.first_held = f.entries.empty() ? 0 : f.entries.front().seq;
  rs.dumped_at_us = h.dumped_at_us + offset;
  rs.clock_error_us = h.clock_error_us;
  if (!h.clock_offset_us) v_.clocks_unknown.push_back(h.rank);
  if (h.clock_error_us) v_.clock_error_us = std::max(v_.clock_error_us, *h.clock_error_us);
  if (!f.entries.empty()) {
    rs.last = f.entries.back();
    for (int64_t* t : {&rs.last.enqueue_us, &rs.last.start_us, &rs.last.end_us})
      if (*t != 0) *t += offset;
  }
  v_.collectives_seen = std::max(v_.collectives_seen, rs.started);

  for (const Entry& e : f.entries) {
    CollectiveSummary& c = seqs_[e.seq];
    ++c.entered;
    if (e.state == EntryState::kCompleted) ++c.completed;
    auto g = std::find_if(c.signatures.begin(), c.signatures.end(), [&](const SignatureGroup& s) {
      return flight::same_signature(s.example, e);
    });
    if (g == c.signatures.end()) {
      c.signatures.push_back({e, {}, 0});
      g = c.signatures.end() - 1;
    }
    if (g->ranks.size() < 8) g->ranks.push_back(h.rank);
    ++g->count;
    if (e.enqueue_us > 0) {
      const int64_t t = e.enqueue_us + offset;
      if (t > c.latest_us) {
        c.second_us = c.latest_us;
        c.latest_us = t;
        c.latest_rank = h.rank;
      } else if (t > c.second_us) {
        c.second_us = t;
      }
      c.first_enqueue_us = std::min(c.first_enqueue_us, t);
      if (e.end_us > 0) c.last_end_us = std::max(c.last_end_us, e.end_us + offset);
    }
  }
}

void Merger::find_divergence(size_t present) {
  // The first collective not completed by every present rank. A rank whose ring no longer held
  // a collective it went past counts as having completed it.
  for (const auto& [seq, c] : seqs_) {
    size_t done = c.completed;
    for (const auto& r : v_.ranks)
      if (r.present && r.first_held > seq) ++done;
    if (done >= present) continue;
    v_.divergent_seq = seq;
    v_.divergent_example = c.signatures.front().example;
    for (size_t i = 0; i < v_.ranks.size(); ++i) {
      const RankSummary& r = v_.ranks[i];
      if (!r.present) continue;
      const int rank = static_cast<int>(i);
      if (r.started < seq)
        v_.never_entered.push_back(rank);
      else if (r.last.seq == seq && r.last.state == EntryState::kStarted) {
        v_.waiting.push_back(rank);
        v_.longest_wait_s = std::max(v_.longest_wait_s, (r.dumped_at_us - r.last.enqueue_us) / 1e6);
      } else if (r.last.seq == seq && r.last.state == EntryState::kFailed)
        v_.failed_in.push_back(rank);
      else
        v_.completed_it.push_back(rank);
    }
    v_.divergence_stalled = !v_.failed_in.empty() || v_.longest_wait_s >= 1.0;
    return;
  }
}

void Merger::count_mismatches() {
  // Mismatches, every one of them.
  for (const auto& [seq, c] : seqs_) {
    if (c.signatures.size() < 2) continue;
    ++v_.mismatched_collectives;
    size_t largest = 0;
    for (const auto& g : c.signatures) largest = std::max(largest, g.count);
    v_.mismatched_entries += c.entered - largest;
    if (v_.first_mismatch_seq == 0) {
      v_.first_mismatch_seq = seq;
      v_.first_mismatch = c.signatures;
      std::stable_sort(v_.first_mismatch.begin(), v_.first_mismatch.end(),
                       [](const auto& a, const auto& b) { return a.count > b.count; });
    }
  }
}

// Stragglers: over the collectives every present rank entered (with times).
void Merger::find_stragglers(size_t present) {
  std::vector<double> waited(v_.ranks.size(), 0.0);
  std::vector<size_t> last_count(v_.ranks.size(), 0), significant(v_.ranks.size(), 0);
  size_t significant_all = 0;
  int64_t span_from = INT64_MAX, span_to = INT64_MIN;
  for (const auto& [seq, c] : seqs_) {
    if (c.entered < present || c.second_us == INT64_MIN) continue;
    ++v_.compared_collectives;
    span_from = std::min(span_from, c.first_enqueue_us);
    span_to = std::max(span_to, std::max(c.last_end_us, c.latest_us));
    const double late = (c.latest_us - c.second_us) / 1000.0;
    const size_t r = static_cast<size_t>(c.latest_rank);
    ++last_count[r];
    waited[r] += late / 1000.0;
    if (late >= kSignificantMs) {
      ++significant[r];
      ++significant_all;
      late_ms_[r].push_back(late);
    }
  }
  const double span_s = span_to > span_from ? (span_to - span_from) / 1e6 : 0.0;
  std::vector<double> present_waits;
  for (size_t r = 0; r < v_.ranks.size(); ++r)
    if (v_.ranks[r].present) present_waits.push_back(waited[r]);
  const double med = median(present_waits);
  std::vector<double> deviations;
  for (double w : present_waits) deviations.push_back(std::fabs(w - med));
  const double mad = median(deviations);
  const double share_needed = std::max(0.5, 1.5 / static_cast<double>(present));
  const double clock_floor_ms = 2.0 * v_.clock_error_us / 1000.0;
  for (size_t r = 0; r < v_.ranks.size(); ++r) {
    if (!v_.ranks[r].present || significant[r] < kMinLateCollectives) continue;
    const double share = static_cast<double>(significant[r]) / significant_all;
    const double med_late = median(late_ms_[r]);
    if (share < share_needed) continue;
    if (med_late < std::max(kSignificantMs, clock_floor_ms)) continue;
    if (span_s <= 0 || waited[r] < 0.02 * span_s) continue;
    if (waited[r] <= med + 5 * std::max(mad, 0.001 * span_s)) continue;
    Straggler s;
    s.rank = static_cast<int>(r);
    s.last_count = significant[r];
    s.collectives = v_.compared_collectives;
    s.median_late_ms = med_late;
    s.waited_s = waited[r];
    s.span_s = span_s;
    v_.stragglers.push_back(s);
  }
}

Findings Merger::finish() {
  size_t present = 0;
  for (const auto& r : v_.ranks) present += r.present ? 1 : 0;
  if (present == 0) return v_;
  find_divergence(present);
  count_mismatches();
  if (present >= 2) find_stragglers(present);
  for (const auto& [seq, c] : seqs_)
    if (c.latest_rank >= 0) v_.last_entered[seq] = {c.latest_us, c.latest_rank};
  std::sort(v_.clocks_unknown.begin(), v_.clocks_unknown.end());
  return v_;
}

namespace {

std::string rank_where(const Findings& v, int rank) {
  const RankSummary& r = v.ranks[static_cast<size_t>(rank)];
  if (!r.present) return "rank " + std::to_string(rank);
  return "rank " + std::to_string(rank) + " (" + core::excerpt(r.host, 64, core::Quote::kNone) +
         ", local rank " + std::to_string(r.local_rank) + ")";
}

std::string group_text(const Findings& v, const std::vector<int>& ranks) {
  if (ranks.size() == 1) return rank_where(v, ranks[0]);
  return "ranks " + ranks_text(ranks);
}

std::string describe(uint64_t seq, const Entry& e) {
  const std::string sig = signature_text(e);
  const auto space = sig.find(' ');
  if (space == std::string::npos) return sig + " #" + std::to_string(seq);
  return sig.substr(0, space) + " #" + std::to_string(seq) + sig.substr(space);
}

constexpr core::Named<EntryState> kEntryStateNames[] = {{EntryState::kStarted, "in flight"},
                                                        {EntryState::kCompleted, "completed"},
                                                        {EntryState::kFailed, "failed"}};

const char* state_word(EntryState s) {
  return core::name_of(s, kEntryStateNames, "in flight").data();
}

// The divergence line: the first collective not every rank completed, and where each rank is.
std::string divergence_line(const Findings& v) {
  if (v.divergent_seq == 0)
    return v.collectives_seen > 0
               ? "no divergence: every rank completed every collective its file holds\n"
               : "";
  std::string out = std::string(v.divergence_stalled ? "first divergence: "
                                                     : "in flight at the dumps (a running job): ") +
                    describe(v.divergent_seq, v.divergent_example) + ":";
  std::vector<std::string> parts;
  for (int r : v.never_entered) {
    if (parts.size() >= 4) break;
    const RankSummary& rs = v.ranks[static_cast<size_t>(r)];
    parts.push_back(" " + rank_where(v, r) + " never entered it (" +
                    (rs.last.seq == 0 ? std::string("it entered no collective")
                                      : "last entered " + describe(rs.last.seq, rs.last) + ", " +
                                            state_word(rs.last.state)) +
                    ")");
  }
  if (v.never_entered.size() > 4)
    parts.push_back(" ranks " + ranks_text(v.never_entered) + " never entered it (" +
                    std::to_string(v.never_entered.size()) + " in all)");
  if (!v.waiting.empty())
    parts.push_back(" " + group_text(v, v.waiting) +
                    (v.waiting.size() == 1 ? " waits in it" : " wait in it") + " (up to " +
                    seconds_text(v.longest_wait_s) + " at the dump)");
  if (!v.failed_in.empty())
    parts.push_back(" " + group_text(v, v.failed_in) + " waited in it until it failed");
  if (!v.completed_it.empty())
    parts.push_back(" " + group_text(v, v.completed_it) + " completed it");
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ";" : "") + parts[i];
  return out + "\n";
}

// The mismatch line: how many collectives the ranks disagree on, and the first one's groups.
std::string mismatch_line(const Findings& v) {
  if (v.mismatched_collectives == 0) return "";
  std::string out = "mismatches: " + std::to_string(v.mismatched_collectives) +
                    (v.mismatched_collectives == 1 ? " collective" : " collectives") +
                    " where ranks disagree (" + std::to_string(v.mismatched_entries) +
                    " rank entries off the majority); first #" +
                    std::to_string(v.first_mismatch_seq) + ":";
  for (size_t i = 0; i < v.first_mismatch.size(); ++i) {
    const auto& g = v.first_mismatch[i];
    out += std::string(i ? ";" : "") + " " +
           (g.count == 1
                ? "rank " + std::to_string(g.ranks[0])
                : "ranks " + ranks_text(g.ranks) +
                      (g.count > g.ranks.size() ? " ... (" + std::to_string(g.count) + ")" : "")) +
           " " + signature_text(g.example);
    if (i > 0) out += " (differs in " + differences(v.first_mismatch[0].example, g.example) + ")";
  }
  return out + "\n";
}

}  // namespace

std::string render_text(const Findings& v, const std::string& dir) {
  std::string out;
  const auto missing = v.missing();
  size_t present = v.ranks.size() - missing.size();
  out += "dtlaunch trace: " + core::excerpt(dir, 120, core::Quote::kNone) + ": run " +
         core::excerpt(v.run_id, 64, core::Quote::kNone) + " attempt " + std::to_string(v.attempt) +
         ", " + std::to_string(present) + " of " + std::to_string(v.world_size) + " ranks, " +
         std::to_string(v.collectives_seen) + " collectives\n";
  if (!missing.empty())
    out += "missing: " + std::string(missing.size() == 1 ? "rank " : "ranks ") +
           ranks_text(missing) + " (no readable file: dead before it could write, or not copied)\n";
  out += divergence_line(v);
  out += mismatch_line(v);
  for (const Straggler& s : v.stragglers) {
    out += "straggler: " + rank_where(v, s.rank) + " entered last, by " + ms_text(kSignificantMs) +
           " or more, in " + std::to_string(s.last_count) + " of the " +
           std::to_string(s.collectives) + " collectives every rank entered, by " +
           ms_text(s.median_late_ms) + " median; the others waited " + seconds_text(s.waited_s) +
           " for it, " + fixed(100.0 * s.waited_s / s.span_s, 0) + "% of the " +
           seconds_text(s.span_s) + " span\n";
  }
  if (v.stragglers.empty() && v.compared_collectives > 0)
    out += "stragglers: none (" + std::to_string(v.compared_collectives) +
           " collectives every rank entered)\n";
  out += "clocks: aligned to rank 0's within " + ms_text(v.clock_error_us / 1000.0);
  if (!v.clocks_unknown.empty())
    out += "; not measured for ranks " + ranks_text(v.clocks_unknown) + " (taken as they are)";
  out += "\n";
  for (size_t i = 0; i < v.skipped.size() && i < kSkippedListed; ++i)
    out += "skipped: " + core::excerpt(v.skipped[i], 300, core::Quote::kNone) + "\n";
  if (v.skipped.size() > kSkippedListed)
    out += "... and " + std::to_string(v.skipped.size() - kSkippedListed) +
           " more skipped files (--format json lists them all)\n";
  for (const auto& s : v.other_runs)
    out += "other run in the directory: " + core::excerpt(s, 600, core::Quote::kNone) + "\n";
  return out;
}

std::string render_json(const Findings& v, const std::string& dir) {
  auto ints = [](const std::vector<int>& xs) {
    return "[" + core::join(xs, ", ", [](auto x) { return std::to_string(x); }) + "]";
  };
  auto strings = [](const std::vector<std::string>& xs) {
    return "[" + core::join(xs, ", ", [](const std::string& x) { return json_quote(x); }) + "]";
  };
  std::string out = "{\"directory\": " + json_quote(dir) + ", \"run_id\": " + json_quote(v.run_id) +
                    ", \"attempt\": " + std::to_string(v.attempt) +
                    ", \"world_size\": " + std::to_string(v.world_size) +
                    ", \"healthy\": " + (v.healthy() ? "true" : "false") +
                    ", \"collectives\": " + std::to_string(v.collectives_seen) +
                    ",\n \"missing_ranks\": " + ints(v.missing()) + ",\n \"ranks\": [";
  bool first = true;
  for (size_t r = 0; r < v.ranks.size(); ++r) {
    const RankSummary& rs = v.ranks[r];
    if (!rs.present) continue;
    out += std::string(first ? "\n" : ",\n") + "  {\"rank\": " + std::to_string(r) +
           ", \"host\": " + json_quote(rs.host) +
           ", \"local_rank\": " + std::to_string(rs.local_rank) +
           ", \"file\": " + json_quote(rs.file) + ", \"kind\": " + json_quote(rs.kind) +
           ", \"reason\": " + json_quote(rs.reason) +
           ", \"collectives_started\": " + std::to_string(rs.started) +
           ", \"last_seq\": " + std::to_string(rs.last.seq) + ", \"last_state\": \"" +
           (rs.last.seq == 0                          ? "none"
            : rs.last.state == EntryState::kCompleted ? "completed"
            : rs.last.state == EntryState::kFailed    ? "failed"
                                                      : "started") +
           "\", \"clock_error_us\": " +
           (rs.clock_error_us ? std::to_string(*rs.clock_error_us) : "null") + "}";
    first = false;
  }
  out += "\n ],\n \"divergence\": ";
  if (v.divergent_seq == 0) {
    out += "null";
  } else {
    out += "{\"seq\": " + std::to_string(v.divergent_seq) +
           ", \"collective\": " + json_quote(signature_text(v.divergent_example)) +
           ", \"never_entered\": " + ints(v.never_entered) + ", \"waiting\": " + ints(v.waiting) +
           ", \"failed_in\": " + ints(v.failed_in) + ", \"completed\": " + ints(v.completed_it) +
           ", \"stalled\": " + (v.divergence_stalled ? "true" : "false") +
           ", \"longest_wait_s\": " + fixed(v.longest_wait_s, 3) + "}";
  }
  out += ",\n \"mismatches\": {\"collectives\": " + std::to_string(v.mismatched_collectives) +
         ", \"rank_entries\": " + std::to_string(v.mismatched_entries) + ", \"first\": ";
  if (v.first_mismatch_seq == 0) {
    out += "null";
  } else {
    out += "{\"seq\": " + std::to_string(v.first_mismatch_seq) + ", \"groups\": [";
    for (size_t i = 0; i < v.first_mismatch.size(); ++i) {
      const auto& g = v.first_mismatch[i];
      out += std::string(i ? ", " : "") +
             "{\"collective\": " + json_quote(signature_text(g.example)) +
             ", \"count\": " + std::to_string(g.count) + ", \"ranks\": " + ints(g.ranks) + "}";
    }
    out += "]}";
  }
  out += "},\n \"stragglers\": [";
  for (size_t i = 0; i < v.stragglers.size(); ++i) {
    const Straggler& s = v.stragglers[i];
    out += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(s.rank) +
           ", \"host\": " + json_quote(v.ranks[static_cast<size_t>(s.rank)].host) +
           ", \"last_by_1ms\": " + std::to_string(s.last_count) +
           ", \"collectives\": " + std::to_string(s.collectives) +
           ", \"median_late_ms\": " + fixed(s.median_late_ms, 3) +
           ", \"waited_s\": " + fixed(s.waited_s, 3) + ", \"span_s\": " + fixed(s.span_s, 3) + "}";
  }
  out += "],\n \"compared_collectives\": " + std::to_string(v.compared_collectives) +
         ", \"clock_error_us\": " + std::to_string(v.clock_error_us) +
         ", \"clocks_unknown\": " + ints(v.clocks_unknown) +
         ",\n \"skipped\": " + strings(v.skipped) + ",\n \"other_runs\": " + strings(v.other_runs) +
         "}\n";
  return out;
}

}  // namespace dtlaunch::trace
