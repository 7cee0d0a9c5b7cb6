// The shell of `dtlaunch job`: runs each attempt's srun, streams its output while reading it for
// evidence (outcome.hpp), ends a step that does not end (SIGINT twice, then scancel JOB.STEP),
// and loops within the budget. Everything it decides comes from job.hpp and outcome.hpp.
#pragma once

#include <iosfwd>
#include <string>

#include "core/env_map.hpp"
#include "job.hpp"

namespace dtlaunch::job {

// Returns the job's exit status: 0 done; 75 preempted (passed through); otherwise the status of
// the last failure (2 bad input, 3 preflight, 76, the program's own...). Throws Error (2) for a
// bad command line or environment before anything was started. srun's output and, with `json`, the
// summary as one JSON line at the end go to stdout and stderr without ever blocking (a stalled
// reader must not stop supervision; what it does not take in time is dropped, said on stderr); the
// attempt lines and the table go to `err`.
int run_job(const JobOptions& options, const std::string& dtlaunch, bool json,
            const core::EnvMap& env, std::ostream& err);

}  // namespace dtlaunch::job
