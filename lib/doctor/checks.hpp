// Rank 0's judgement of the reports of a job: which problems would stop it or slow it down.
// Pure: the same reports always give the same problems, in the same order.
#pragma once

#include <string>
#include <vector>

#include "doctor/report.hpp"

namespace dtlaunch::doctor {

enum class Severity { kWarning, kError };

struct Problem {
  std::string kind;  // fixed names, documented in docs/doctor.md: "missing-rank", ...
  Severity severity = Severity::kError;
  std::vector<std::uint32_t> ranks;
  std::vector<std::string> hosts;
  std::string message;  // one line
};

// One network test between two nodes (network.hpp), as rank 0 reports it.
struct NetworkLink {
  std::string from, to;              // the host that started the test, and its peer
  double rtt_us = 0;                 // median round trip
  double sent_bytes_per_s = -1;      // from -> to; -1 when not measured
  double received_bytes_per_s = -1;  // to -> from
  std::string error;
};

// Rank 0's judgement of the whole job: what diagnose() found in the reports.
struct Diagnosis {
  std::vector<TaskReport> reports;  // by rank; duplicates kept after the first
  std::vector<Problem> problems;
  std::vector<NetworkLink> network;  // with --network: every test made
  std::string network_summary;       // its one line for the table
  std::string exclude;  // the hosts to pass to srun/sbatch --exclude (compare.hpp); "" when none
  bool ok() const;      // no problem of severity kError
};

struct CheckLimits {
  std::int64_t clock_skew_ms = 2000;
  std::int64_t slow_start_ms = 10000;
  std::uint64_t min_shm_bytes = 1ull << 30;
};

// `reports` as they arrived at rank 0 (rank 0's own first), with received_unix_ms set.
// `rank0_problem` is what rank 0 itself found before any report came (its port in use), if any.
Diagnosis diagnose(const Expectation& expected, std::vector<TaskReport> reports,
                   std::vector<Problem> found_by_rank0 = {}, const CheckLimits& limits = {});

// The report rank 0 prints: a table, one row per node, then the problems; or one JSON object
// {"ok": bool, "ranks": [...], "problems": [...]} (docs/doctor.md lists every key).
std::string render_table(const Diagnosis& verdict);
std::string render_json(const Diagnosis& verdict);

}  // namespace dtlaunch::doctor
