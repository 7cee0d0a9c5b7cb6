// What each dtlaunch command does once its command line is parsed. apps/dtlaunch only parses
// and maps the one Error type to an exit status; everything else happens here.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "core/names.hpp"
#include "launch/options.hpp"
#include "trace/trace_dir.hpp"

namespace dtlaunch::cli {

enum class OutputFormat { kShell, kJson };
inline constexpr core::Named<OutputFormat> kOutputFormatNames[] = {{OutputFormat::kShell, "shell"},
                                                                   {OutputFormat::kJson, "json"}};

// `dtlaunch doctor` and --preflight (docs/doctor.md): every task reports to rank 0 at
// MASTER_ADDR:MASTER_PORT before anything starts.
enum class Check { kNone, kDoctor, kPreflight };

struct RunFlags {
  bool dry_run = false;
  OutputFormat format = OutputFormat::kShell;
  bool verbose = false;
  Check check = Check::kNone;
  std::chrono::milliseconds check_timeout{std::chrono::seconds(60)};
  bool check_json = false;  // doctor: --format json
  // doctor --network / --preflight-network: the bounded network test between the nodes.
  bool check_network = false;
  std::chrono::milliseconds network_budget{std::chrono::seconds(2)};
  // --watch (Slurm path): stay the program's parent, in a heartbeat with the other tasks'
  // dtlaunch; a lost peer stops the program and dtlaunch exits 76 (docs/cli.md).
  bool watch = false;
  std::chrono::milliseconds watch_timeout{std::chrono::seconds(10)};
};

// The launch: under Slurm it execs and so does not return on success; in local mode it returns
// the supervised group's exit status; with dry_run it prints the plan to `out` and returns 0.
// With Check::kDoctor it starts nothing and returns 0 (healthy) or 3 (a problem found), rank 0
// printing the report on `out`; with kPreflight it does the same checks first and returns 3
// without starting anything when they fail.
// Throws Error for anything wrong, before anything was started.
int run_launch(const launch::LaunchOptions& options, const RunFlags& flags, const core::EnvMap& env,
               std::ostream& out);

// `dtlaunch hostnames EXPR...`: one host per line. Nothing is printed unless every expression
// is valid.
int run_hostnames(const std::vector<std::string>& expressions, std::ostream& out);

// `dtlaunch hostlist NAME...`: the ranged expression of all the names, in order.
int run_hostlist(const std::vector<std::string>& names, std::ostream& out);

// `dtlaunch trace DIR`: the merged flight records (docs/cli.md); its own exit statuses.
int run_trace_command(const trace::TraceOptions& options, std::ostream& out, std::ostream& err);

// `dtlaunch env-table`: the Markdown table of exported variables that docs/environment.md holds.
int run_env_table(std::ostream& out);

}  // namespace dtlaunch::cli
