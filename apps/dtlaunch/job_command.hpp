// `dtlaunch job [OPTIONS] [--] PROGRAM [ARGS...]`: the restart driver's command line
// (lib/job, docs/resilience.md).
#pragma once

#include <CLI/CLI.hpp>

#include "job/job.hpp"

namespace dtlaunch {

struct JobCommand {
  job::JobOptions options;
  bool json = false;
};

CLI::App* add_job_options(CLI::App& app, JobCommand& command);

// Runs the parsed command: the program is what CLI11 left over.
int run_job_command(const CLI::App& app, const CLI::App& job_app, JobCommand& command,
                    char** environ_vars);

}  // namespace dtlaunch
