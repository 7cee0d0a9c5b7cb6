// `dtlaunch job`: one driver in the batch script runs the training step with srun on N nodes of
// the allocation, keeps K as spares, and after a failed attempt excludes the node that caused it
// and starts again on the rest plus a spare, within one restart budget for the whole job
// (docs/resilience.md). This header is the pure core: no I/O, table-driven tests in
// tests/unit/job_test.cpp. driver.hpp runs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/env_map.hpp"

namespace dtlaunch::job {

// What the batch script was given, read once from Slurm's job environment.
struct Allocation {
  std::string job_id;
  std::vector<std::string> nodes;            // SLURM_JOB_NODELIST, in Slurm's order
  std::uint32_t tasks_per_node = 1;          // --ntasks-per-node, else the first node's share
  std::optional<std::string> gpus_per_node;  // SLURM_GPUS_PER_NODE, passed on to srun
  // SLURM_CPUS_PER_TASK: since Slurm 22.05 srun no longer inherits --cpus-per-task.
  std::optional<std::string> cpus_per_task;
  // SLURMD_NODENAME, else the host's name: where the batch script runs, and with --live the
  // job's store, whose address every node's step is given.
  std::string batch_host;
};

// Throws Error (bad input, 2) naming the variable when the environment is not a batch job's.
Allocation read_allocation(const core::EnvMap& env);

struct JobOptions {
  std::optional<std::uint32_t> nodes;           // --nodes: default all but the spares
  std::optional<std::uint32_t> spare_nodes;     // --spare-nodes: default all but --nodes, else 0
  std::optional<std::uint32_t> min_nodes;       // --min-nodes: continue on fewer (default: nodes)
  std::uint32_t max_restarts = 3;               // --max-restarts: for the whole job
  std::optional<std::uint32_t> tasks_per_node;  // --ntasks-per-node: default the allocation's
  std::chrono::milliseconds stop_grace{std::chrono::seconds(30)};  // --stop-grace
  bool watch = false;                                              // run dtlaunch --watch PROGRAM
  // --live: one step per node; a lost node's ranks are started again on a spare while the others
  // keep running (the DDP runtime's live recovery, docs/resilience.md).
  bool live = false;
  std::string store_program = "dtlaunch-store";  // --store-program: hosts the store for --live
  // --no-retry-exit: the program's exit statuses that mean "a restart cannot help" (a corrupt
  // dataset, a config error): an attempt in which a task exits with one of them ends the job.
  std::set<int> no_retry_exits;
  std::vector<std::string> srun_args;    // --srun-arg, verbatim, before dtlaunch
  std::vector<std::string> launch_args;  // options for each task's dtlaunch
  std::vector<std::string> program;      // PROGRAM ARGS
};

// --no-retry-exit's value: exit statuses 1-255, comma-separated, ranges allowed ("3,10-12").
// Throws Error (bad input, 2) naming `flag` and the part that is wrong.
std::set<int> parse_exit_statuses(std::string_view flag, std::string_view text);

// The sizes the job runs with; throws Error (2) when they do not fit the allocation.
struct Sizes {
  std::uint32_t nodes = 0;
  std::uint32_t spares = 0;
  std::uint32_t min_nodes = 0;
  std::uint32_t tasks_per_node = 1;
};
Sizes decide_sizes(const Allocation& allocation, const JobOptions& options);

// The stop line when fewer than --min-nodes healthy nodes are left (`left` of them, `excluded`
// excluded); it advises --min-nodes only where that can help.
std::string out_of_nodes(std::size_t left, const std::set<std::string>& excluded,
                         const Sizes& sizes, const JobOptions& options);

// The nodes of the next attempt: the first `want` nodes of the allocation that are not
// excluded, so the nodes of the last attempt that were not excluded (its victims) are kept and
// spares fill the gaps in allocation order. Fewer when not enough are left; the caller decides.
std::vector<std::string> choose_nodes(const std::vector<std::string>& allocation,
                                      const std::set<std::string>& excluded, std::uint32_t want);

// srun's command line for one attempt (`restart` 0 for the first). `dtlaunch` is the path of
// the tasks' dtlaunch.
std::vector<std::string> srun_command(const std::string& dtlaunch,
                                      const std::vector<std::string>& nodes, const Sizes& sizes,
                                      const Allocation& allocation, const JobOptions& options,
                                      std::uint32_t restart);

// --live: srun's command line for node `slot` of `slots`, on `node`, as its own step
// (dtlaunch --job-node). A replacement is started beside whatever the lost node's step left
// behind on that node (--overlap), as a restart's step is.
std::vector<std::string> node_step_command(const std::string& dtlaunch, const std::string& node,
                                           std::uint32_t slot, std::uint32_t slots,
                                           const Sizes& sizes, const Allocation& allocation,
                                           const JobOptions& options, bool replacement);

// --live: the spare for a lost node: the first node of the allocation neither excluded nor in use
// nor back in service; else the first node back in service (`returned`, in the order they came
// back: a lost node whose old step ended) that is not in use. A fresh spare goes first: a node
// that lost ranks once is more likely than one never used to lose them again.
std::optional<std::string> choose_spare(const std::vector<std::string>& allocation,
                                        const std::set<std::string>& excluded,
                                        const std::set<std::string>& in_use,
                                        const std::vector<std::string>& returned = {});

// --live: what every node's step is given: the store on the batch host, hosted apart from the
// ranks, and live recovery on.
std::vector<std::pair<std::string, std::string>> live_environment(const std::string& store_host,
                                                                  std::uint16_t store_port);

// "0-1" of srun's failure line, for a step whose task 0 is rank `first`: "4-5".
std::string ranks_of_tasks(std::string_view tasks, std::uint32_t first);

// The variables an attempt adds to the driver's environment, which srun hands to the tasks: the
// restart count, and the attempt's secret `job_key` (64 hex digits, fresh per attempt, so that a
// frame captured in one attempt is refused in the next; docs/security.md).
std::vector<std::pair<std::string, std::string>> attempt_environment(std::uint32_t restart,
                                                                     const std::string& job_key);

// The user's --srun-arg asks srun to label the tasks' lines (-l, --label): the job's output then
// keeps the labels that srun is always given.
bool srun_labels_asked(const std::vector<std::string>& srun_args);

}  // namespace dtlaunch::job
