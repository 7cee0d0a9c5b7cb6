#include "cli/log.hpp"

#include <cstdio>

namespace dtlaunch::cli {

namespace {

// The level's word as the launcher has always printed it (spdlog's names, which it used once).
const char* level_word(launch::Note::Level level) {
  switch (level) {
    case launch::Note::Level::kWarn:
      return "warning";
    case launch::Note::Level::kInfo:
      return "info";
    case launch::Note::Level::kDebug:
      break;
  }
  return "debug";
}

}  // namespace

void log_notes(const std::vector<launch::Note>& notes, const std::string& who, bool is_rank0,
               bool verbose) {
  for (const launch::Note& n : notes) {
    if (n.rank0_only && !is_rank0) continue;
    if (n.level != launch::Note::Level::kWarn && !verbose) continue;
    // One write per line, so that the lines of many tasks sharing srun's stderr do not mix.
    const std::string line = "dtlaunch[" + who + "] " + level_word(n.level) + ": " + n.text + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

}  // namespace dtlaunch::cli
