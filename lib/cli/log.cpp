#include "cli/log.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>

namespace dtlaunch::cli {

void log_notes(const std::vector<launch::Note>& notes, const std::string& who, bool is_rank0,
               bool verbose) {
  std::shared_ptr<spdlog::logger> logger;  // made only when there is something to say
  for (const launch::Note& n : notes) {
    if (n.rank0_only && !is_rank0) continue;
    if (n.level != launch::Note::Level::kWarn && !verbose) continue;
    if (!logger) {
      logger = std::make_shared<spdlog::logger>("dtlaunch",
                                                std::make_shared<spdlog::sinks::stderr_sink_st>());
      logger->set_pattern("dtlaunch[" + who + "] %l: %v");
      logger->set_level(spdlog::level::debug);
    }
    switch (n.level) {
      case launch::Note::Level::kWarn:
        logger->warn(n.text);
        break;
      case launch::Note::Level::kInfo:
        logger->info(n.text);
        break;
      case launch::Note::Level::kDebug:
        logger->debug(n.text);
        break;
    }
  }
}

}  // namespace dtlaunch::cli
