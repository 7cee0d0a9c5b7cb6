// `dtlaunch trace DIR` (docs/cli.md): the thin I/O shell around the pure reader and merger.
#pragma once

#include <iosfwd>
#include <string>

#include "core/names.hpp"

namespace dtlaunch::trace {

enum class TraceFormat { kText, kJson, kChrome };
inline constexpr core::Named<TraceFormat> kTraceFormatNames[] = {
    {TraceFormat::kText, "text"}, {TraceFormat::kJson, "json"}, {TraceFormat::kChrome, "chrome"}};

struct TraceOptions {
  std::string dir;
  TraceFormat format = TraceFormat::kText;
  std::string html;     // --html FILE: also write the timeline page there
  std::string run_id;   // --run ID: that run's files, not the newest run's
  std::string attempt;  // --attempt N: that attempt of the run, not its newest (checked here)
};

// Exit statuses: 0 the ranks agree and nobody straggles; 3 a problem found (a missing rank, a
// divergence, a mismatch, a straggler); 66 no readable flight record in DIR (EX_NOINPUT); throws
// Error (status 2) for a DIR that is not a directory, an unknown --run, an --attempt that is not
// one of the run's or an --html path that cannot be written.
inline constexpr int kTraceProblem = 3, kTraceNoInput = 66;
int run_trace(const TraceOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dtlaunch::trace
