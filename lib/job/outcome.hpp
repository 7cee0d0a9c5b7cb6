// What an attempt's output says about who failed and why (the pure core of `dtlaunch job`).
// The evidence is read line by line from the streamed output of srun and its tasks:
//   - srun's own per-node lines (never a task's: srun labels those, srun_output.hpp):
//     "srun: error: NODE: tasks 0-1: Exited with exit code 76",
//     "srun: error: NODE: task 2: Killed", in the order srun saw them;
//   - the lines a task's dtlaunch seals with the attempt's job key (core::seal_line), never
//     the look-alikes the program prints: the DDP runtime's and --watch's first verdict,
//     naming each lost rank's host ("rank 4 (cn3) exited", or "this rank 2 (cn2) was declared
//     lost" on a cut-off node), and the preflight's "exclude: cn[3,7]".
// classify() turns it into the culprit nodes, the cause and whether a restart can help.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/hmac.hpp"
#include "job/srun_output.hpp"

namespace dtlaunch::job {

struct TaskFailure {
  std::string node;
  std::string tasks;  // as srun wrote them: "0-1", "2"
  int status = 0;     // exit code, or 128+N when killed by signal N
  std::string how;    // srun's words: "Exited with exit code 3", "Killed"
};

struct Evidence {
  std::vector<TaskFailure> failures;      // in the order srun printed them
  std::set<std::string> lost_nodes;       // named by survivors' "peer lost" messages
  std::vector<std::string> lost_reports;  // the same, every naming in the order read (--live)
  std::set<std::string> preflight_exclude;
  std::string first_lost_message;  // the first "peer lost" line, for the attempt's cause
  bool cancelled = false;          // the driver had to scancel the step
};

// Reads one line of output into `evidence` (any other line is ignored).
// `source`: srun's own line, or a task's (srun_output.hpp); only srun's own say how a task ended,
// and of a task's, only those sealed with `key`, the attempt's DTLAUNCH_JOB_KEY.
void observe_line(std::string_view line, LineSource source, const core::JobKey& key,
                  Evidence& evidence);

// What the driver does after an attempt.
enum class Decision {
  kSucceeded,  // srun exited 0: the job is done
  kRestart,    // a restart on other nodes (or the same, when no node is to blame) may help
  kPreempted,  // exit 75: stopped to be resumed; passed through, never retried
  kPermanent,  // bad input or the same failure on every node: no restart can help
};

struct Outcome {
  Decision decision = Decision::kRestart;
  std::set<std::string> culprits;  // to exclude
  std::string cause;               // one line
  int exit_status = 0;             // what the job exits with if it stops here
  // How it failed, without where: the culprits' own statuses ("exit 3", "signal 11") and the
  // collective the lost rank was last in when the runtime named it ("all_reduce #799"). Empty
  // when nothing says how (a node that went silent): two attempts that failed the same way
  // stop the job (repeated_failure).
  std::string signature;
};

// `nodes` are the attempt's nodes; `srun_status` srun's exit status (128+N for a signal);
// `no_retry_exits` --no-retry-exit's statuses: a task that exits with one ends the job.
Outcome classify(const Evidence& evidence, const std::vector<std::string>& nodes, int srun_status,
                 const std::set<int>& no_retry_exits = {});

// One attempt, for the per-attempt line and the summary.
struct AttemptRecord {
  std::uint32_t attempt = 0;  // 1-based
  std::vector<std::string> nodes;
  Outcome outcome;
  std::chrono::milliseconds wall{0};  // srun's run time: start to the step's end
  // From the first failure srun reported to the step's end (0 when none): how long stopping took.
  std::chrono::milliseconds stop{0};
  // --live: the nodes whose ranks were started again on a spare while the others ran on,
  // "cn2 -> cn4 (ranks 2-3)".
  std::vector<std::string> replaced;
};

// Why to stop rather than restart after the last of `attempts` failed: it and the one before
// failed the same way (the same signature), so a restart on other nodes is not helping (the
// restart loops of Megatron-LM #5281). nullopt to go on.
std::optional<std::string> repeated_failure(const std::vector<AttemptRecord>& attempts);

std::string attempt_line(const AttemptRecord& record);
std::string summary_table(const std::vector<AttemptRecord>& attempts, std::string_view result);
std::string summary_json(const std::vector<AttemptRecord>& attempts, std::string_view result,
                         int exit_status);

}  // namespace dtlaunch::job
