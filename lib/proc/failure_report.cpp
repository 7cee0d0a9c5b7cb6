#include "proc/failure_report.hpp"

#include <cstring>

#include "core/text.hpp"

namespace dtlaunch::proc {

namespace {

bool stopped_to_resume(int exit_code, int signal) {
  return signal == 0 && exit_code == kExitStoppedToResume;
}

}  // namespace

std::string describe_end(int exit_code, int signal, bool core_dumped) {
  if (signal == 0) return "exit " + std::to_string(exit_code);
  std::string text = "killed by " + core::signal_text(signal);
  if (core_dumped) text += " (core dumped)";
  return text;
}

bool is_stopped_to_resume(const WorkerFailure& failure) {
  return stopped_to_resume(failure.exit_code, failure.signal);
}

std::string describe_outcome(int exit_code, int signal) {
  if (stopped_to_resume(exit_code, signal)) return "stopped to be resumed (exit 75)";
  if (signal == 0 && exit_code == kExitPeerLost) return "lost a peer (exit 76)";
  return "failed (" + describe_end(exit_code, signal, false) + ")";
}

int exit_status_of(const WorkerFailure& failure) {
  return failure.signal != 0 ? 128 + failure.signal : failure.exit_code;
}

std::string rank_prefix(std::uint32_t rank) {
  return "[rank " + std::to_string(rank) + "] ";
}

std::string format_failure_report(const WorkerFailure& failure, std::string_view host) {
  std::string text = "dtlaunch: rank " + std::to_string(failure.rank) + " (local " +
                     std::to_string(failure.local_rank) + ")";
  if (!host.empty()) text.append(" on ").append(host);
  if (stopped_to_resume(failure.exit_code, failure.signal))
    text += " stopped to be resumed: exit 75 (EX_TEMPFAIL)";
  else if (failure.signal == 0 && failure.exit_code == kExitPeerLost)
    text += " lost a peer: exit 76 (another rank was lost; this one was healthy)";
  else
    text += " failed: " + describe_end(failure.exit_code, failure.signal, failure.core_dumped);
  if (failure.ignored_signal != 0) {
    text += " (from dtlaunch: still running " + core::duration_text(failure.grace) + " after " +
            core::signal_text(failure.ignored_signal) + ")";
  }
  const std::size_t n = failure.last_lines.size();
  if (n == 0) {
    text += "; it wrote nothing\n";
    return text;
  }
  text += n == 1 ? "; its last line:\n" : "; its last " + std::to_string(n) + " lines:\n";
  const std::string prefix = "  " + rank_prefix(failure.rank);
  for (const std::string& line : failure.last_lines) text.append(prefix).append(line) += '\n';
  return text;
}

}  // namespace dtlaunch::proc
