// dtlaunch's commands, one file each (NAME_command.cpp): each declares its options with CLI11,
// bound to what lib/ takes, and runs once parsed by calling lib/. main.cpp only dispatches.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "command_line.hpp"
#include "job/job.hpp"
#include "launch/options.hpp"
#include "trace/trace_dir.hpp"

namespace dtlaunch {

// `dtlaunch [OPTIONS] [--] PROGRAM [ARGS...]` (launch_command.cpp), the top-level command, and
// `dtlaunch doctor [OPTIONS] [PROGRAM...]` (doctor_command.cpp), which share the options of a
// launch and differ in --dry-run, --preflight, --watch and the meaning of --format and the
// timeouts.
struct LaunchCommand {
  launch::LaunchOptions options;
  cli::RunFlags flags;
};

// The top-level app's description, footer and options. Sets prefix_command(): everything from
// the program on is left for program_argv.
void add_launch_command(CLI::App& app, LaunchCommand& command);
int run_launch_command(const CLI::App& app, LaunchCommand& command, char** environ_vars);

// The options a launch and doctor share: -v, where rank 0 listens, the binding, the run id and
// the local mode's. `app` must have prefix_command() set.
void add_shared_launch_options(CLI::App& app, LaunchCommand& command);

// How long the checks wait for every task, and how long their network test takes: `dtlaunch
// doctor`'s --timeout and --network-budget, a launch's --preflight-timeout and
// --preflight-network-budget. `checks` names them in the help ("the preflight checks").
void add_check_budgets(CLI::App& app, cli::RunFlags& flags, const std::string& prefix,
                       const std::string& checks);

CLI::App* add_doctor_command(CLI::App& app, LaunchCommand& command);
int run_doctor_command(const CLI::App& app, const CLI::App& doctor_app, LaunchCommand& command,
                       char** environ_vars);

// hostnames_command.cpp, hostlist_command.cpp: run before CLI11 parses (run_verbatim).
extern const VerbatimCommand kHostnamesCommand;
extern const VerbatimCommand kHostlistCommand;

CLI::App* add_env_table_command(CLI::App& app);
int run_env_table_command(const CLI::App& env_table_app);

// `dtlaunch trace DIR [--format text|json|chrome] [--html FILE] [--run ID]`.
CLI::App* add_trace_command(CLI::App& app, trace::TraceOptions& options);
int run_trace_command(const CLI::App& app, const CLI::App& trace_app,
                      const trace::TraceOptions& options);

// `dtlaunch job [OPTIONS] [--] PROGRAM [ARGS...]`: the restart driver (lib/job,
// docs/resilience.md).
struct JobCommand {
  job::JobOptions options;
  bool json = false;
};
CLI::App* add_job_command(CLI::App& app, JobCommand& command);
int run_job_command(const CLI::App& app, const CLI::App& job_app, JobCommand& command,
                    char** environ_vars);

}  // namespace dtlaunch
