// `dtlaunch job --live`: one attempt as one srun step per node, beside a store hosted apart from
// the ranks. When a node is lost (its step failed, or a survivor's sealed "peer lost" line names
// it), only its ranks are started again, on a spare, as a new step that joins the running job;
// the other steps go on. Without a spare or budget, the attempt ends as a plain one would, and the
// restart loop of driver.cpp goes on from there (docs/resilience.md).
#pragma once

#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "core/hmac.hpp"
#include "job/job.hpp"
#include "job/srun_process.hpp"
#include "proc/output_relay.hpp"

namespace dtlaunch::job {

struct LiveAttempt {
  detail::AttemptRun run;             // what classify() reads: evidence, status, times
  std::vector<std::string> nodes;     // the attempt's nodes at its end, spares in place
  std::vector<std::string> replaced;  // "cn2 -> cn4 (ranks 2-3)", in order
  std::set<std::string> lost;         // the nodes whose ranks were replaced
};

struct LivePlan {
  const std::string& dtlaunch;
  const Allocation& allocation;
  const Sizes& sizes;
  const JobOptions& options;
  std::vector<std::string> nodes;   // the attempt's nodes, slot i on nodes[i]
  std::set<std::string> excluded;   // never a spare
  std::uint32_t replacements_left;  // what the restart budget still allows
  bool strip_labels;
};

// Runs the attempt to its end. Throws Error when the store cannot be started.
LiveAttempt run_live_attempt(const LivePlan& plan, const core::JobKey& key, proc::Console& console,
                             std::ostream& err);

}  // namespace dtlaunch::job
