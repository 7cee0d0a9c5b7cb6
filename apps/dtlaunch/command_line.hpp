// dtlaunch's options, bound with CLI11 straight to what lib/ takes (launch/options.hpp,
// cli/commands.hpp). Each option is declared, checked and converted once, here.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

namespace dtlaunch {

struct LaunchCommand {
  launch::LaunchOptions options;
  cli::RunFlags flags;
};

// The options of a launch (`dtlaunch ...`) or of `dtlaunch doctor ...`, which share all but
// --dry-run, --preflight and the meaning of --format and the timeout. The app must have
// prefix_command() set: everything from the program on is left for program_argv.
void add_launch_options(CLI::App& app, LaunchCommand& command, bool doctor);

// `dtlaunch trace DIR [--format text|json|chrome] [--html FILE] [--run ID]`.
using TraceCommand = trace::TraceOptions;
CLI::App* add_trace_options(CLI::App& app, TraceCommand& command);

// The program and its arguments after a parse: what follows "--", or the first positional on.
// Throws Error (usage) for an unknown option that CLI11 would hand over as the program name.
std::vector<std::string> program_argv(const CLI::App& app);

}  // namespace dtlaunch
