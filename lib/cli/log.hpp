// The launcher's log: every line on stderr, prefixed with who says it, so that the interleaved
// output of many srun tasks can be told apart.
#pragma once

#include <string>
#include <vector>

#include "launch/spec.hpp"

namespace dtlaunch::cli {

// Logs the notes: warnings always, info and debug only when verbose; notes marked rank0_only
// only when is_rank0. `who` is the prefix, e.g. "rank 3" or "node 0".
void log_notes(const std::vector<launch::Note>& notes, const std::string& who, bool is_rank0,
               bool verbose);

}  // namespace dtlaunch::cli
