// `dtlaunch trace DIR [OPTIONS]`: the DDP runtime's flight records merged (lib/trace).
#include <iostream>

#include "cli/commands.hpp"
#include "core/text.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

CLI::App* add_trace_command(CLI::App& app, trace::TraceOptions& options) {
  CLI::App* sub = app.add_subcommand(
      "trace",
      "Merge the flight records every rank of a DDP job wrote into DIR (DTLAUNCH_DDP_TRACE_DIR): "
      "the first collective where the ranks diverge, who never entered it and who waits, "
      "mismatches, stragglers (docs/cli.md).\n\n  dtlaunch trace DIR [OPTIONS]");
  sub->footer(
      "Exit status: 0 the ranks agree and nobody straggles; 3 a problem found; 66 no readable "
      "flight record in DIR; 2 bad input.");
  sub->add_option("DIR", options.dir, "the directory of the rank files")->required();
  add_choice(*sub, "--format", options.format, trace::kTraceFormatNames,
             "text (default), json, or chrome (a Chrome-trace / Perfetto timeline on stdout; the "
             "verdict on stderr)");
  sub->add_option("--html", options.html,
                  "also write a self-contained HTML timeline (one track per rank) to this file");
  sub->add_option("--run", options.run_id,
                  "the run id whose files to read (default: the run of the newest file)");
  sub->add_option("--attempt", options.attempt,
                  "which attempt of the run to read, a number as the verdict's first line shows "
                  "it (default: the attempt of the run's newest file)");
  return sub;
}

int run_trace_command(const CLI::App& app, const CLI::App& trace_app,
                      const trace::TraceOptions& options) {
  // CLI11 hands what it cannot place (a second DIR, anything after a "--" that ends the
  // options) to the parent or the subcommand as "remaining": trace takes one DIR, nothing else.
  std::vector<std::string> extra = app.remaining();
  for (const std::string& arg : trace_app.remaining()) extra.push_back(arg);
  for (const std::string& arg : extra)
    if (arg != "--")
      return usage_error("trace takes one DIR, got also '" + core::excerpt(arg) + "'");
  return cli::run_trace_command(options, std::cout, std::cerr);
}

}  // namespace dtlaunch
