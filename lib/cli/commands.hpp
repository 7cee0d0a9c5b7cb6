// What each dtlaunch command does once its command line is parsed. apps/dtlaunch only parses
// and maps the one Error type to an exit status; everything else happens here.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "launch/options.hpp"

namespace dtlaunch {

enum class OutputFormat { kShell, kJson };

struct RunFlags {
  bool dry_run = false;
  OutputFormat format = OutputFormat::kShell;
  bool verbose = false;
};

// The launch: under Slurm it execs and so does not return on success; in local mode it returns
// the supervised group's exit status; with dry_run it prints the plan to `out` and returns 0.
// Throws Error for anything wrong, before anything was started.
int run_launch(const LaunchOptions& options, const RunFlags& flags, const EnvMap& env,
               std::ostream& out);

// `dtlaunch hostnames EXPR...`: one host per line. Nothing is printed unless every expression
// is valid.
int run_hostnames(const std::vector<std::string>& expressions, std::ostream& out);

// `dtlaunch hostlist NAME...`: the ranged expression of all the names, in order.
int run_hostlist(const std::vector<std::string>& names, std::ostream& out);

// `dtlaunch env-table`: the Markdown table of exported variables that docs/environment.md holds.
int run_env_table(std::ostream& out);

}  // namespace dtlaunch
