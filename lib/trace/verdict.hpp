// The verdict of `dtlaunch trace` (docs/cli.md): every rank's flight record merged, one file at a
// time, into a summary whose size depends on the ranks and the collectives held, not on the files.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trace/record.hpp"

namespace dtlaunch::trace {

// What one rank's file said, kept after the file is gone.
struct RankSummary {
  bool present = false;
  std::string file, host, kind, reason;
  int local_rank = -1;
  uint64_t started = 0;      // collectives_started
  uint64_t first_held = 0;   // the oldest seq its ring still held (0: none)
  Entry last;                // the newest entry (seq 0: none), times on rank 0's clock
  int64_t dumped_at_us = 0;  // rank 0's clock
  std::optional<int64_t> clock_error_us;
};

// One signature's ranks for a collective (the first 8 of them, and the count).
struct SignatureGroup {
  Entry example;
  std::vector<int> ranks;  // at most 8
  size_t count = 0;
};

// One collective, as far as the files held it.
struct CollectiveSummary {
  size_t entered = 0, completed = 0;
  std::vector<SignatureGroup> signatures;  // usually one
  // The two latest to enter (rank 0's clock), for the straggler statistics.
  int64_t latest_us = INT64_MIN, second_us = INT64_MIN;
  int latest_rank = -1;
  int64_t first_enqueue_us = INT64_MAX, last_end_us = INT64_MIN;
};

struct Straggler {
  int rank = -1;
  size_t last_count = 0, collectives = 0;  // entered last in last_count of collectives
  double median_late_ms = 0;               // by how much, median, over those
  double waited_s = 0, span_s = 0;         // what the others waited for it, in the span
};

// What the records of one run say: each rank's place, where they diverged, what mismatched, who
// was lost (merge_run in trace_dir.cpp builds it; the text, HTML and chrome views draw it).
struct Findings {
  std::string run_id;
  int attempt = 0;
  int world_size = 0;
  std::vector<RankSummary> ranks;       // world_size of them
  std::vector<std::string> skipped;     // "FILE: why", the files not used
  std::vector<std::string> other_runs;  // "RUN attempt A (N files)", files of runs not shown
  uint64_t collectives_seen = 0;        // the highest seq any rank entered
  // The first collective that not every present rank completed (0: none).
  uint64_t divergent_seq = 0;
  Entry divergent_example;
  std::vector<int> never_entered, waiting, failed_in, completed_it;
  // A divergence is a problem when a rank failed in it, or a waiting rank had waited 1 s or more
  // at its dump; otherwise it is only where a running job's ranks were when they were dumped.
  bool divergence_stalled = false;
  double longest_wait_s = 0;  // of the waiting ranks, at their dumps
  // Mismatches: collectives whose ranks disagree, counted in full.
  size_t mismatched_collectives = 0, mismatched_entries = 0;
  uint64_t first_mismatch_seq = 0;
  std::vector<SignatureGroup> first_mismatch;
  std::vector<Straggler> stragglers;
  size_t compared_collectives = 0;  // entered by every present rank, with times
  int64_t clock_error_us = 0;       // the largest bound of the ranks' alignment
  std::vector<int> clocks_unknown;  // ranks whose offset to rank 0 was not measured
  // Per collective: when its last rank entered (rank 0's clock) and which rank that was; for the
  // pictures' waits.
  std::map<uint64_t, std::pair<int64_t, int>> last_entered;

  std::vector<int> missing() const;
  bool healthy() const;  // nothing missing, diverged, mismatched or straggling
};

// Merges one file at a time: add() every chosen rank's file, then finish().
class Merger {
 public:
  Merger(std::string run_id, int attempt, int world_size);
  void add(const std::string& file, const RankFile& f);
  void skip(const std::string& file, const std::string& why) {
    v_.skipped.push_back(file + ": " + why);
  }
  void other_run(const std::string& what) { v_.other_runs.push_back(what); }
  Findings finish();

 private:
  // The steps of finish(); `present`: the ranks with a file.
  void find_divergence(size_t present);
  void count_mismatches();
  void find_stragglers(size_t present);

  Findings v_;
  std::map<uint64_t, CollectiveSummary> seqs_;
  // Per rank, per collective it entered: how late it was against the second latest.
  std::vector<std::vector<double>> late_ms_;
};

// The verdict in a few lines, and as JSON (keys in docs/cli.md). The text names the first
// kSkippedListed skipped files and counts the rest (a directory of 100,000 junk files was
// 100,000 lines); the JSON lists them all.
inline constexpr size_t kSkippedListed = 20;
std::string render_text(const Findings& v, const std::string& dir);
std::string render_json(const Findings& v, const std::string& dir);

}  // namespace dtlaunch::trace
