// dtlaunch's command line: parse, call lib/, turn the one error type into an exit status.
#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "command_line.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "job_command.hpp"

extern char** environ;

namespace {

using dtlaunch::core::ExitCode;

constexpr const char* kDescription =
    "Launch distributed PyTorch/LibTorch workers under Slurm or locally.\n\n"
    "  dtlaunch [OPTIONS] [--] PROGRAM [ARGS...]\n"
    "  dtlaunch hostnames EXPR...    expand Slurm hostlists, one host per line\n"
    "  dtlaunch hostlist NAME...     compress host names into a hostlist\n"
    "  dtlaunch env-table            the tables of the variables exported, removed and read\n"
    "  dtlaunch doctor [OPTIONS] [PROGRAM...]   check that the job can start (see --help)\n"
    "  dtlaunch trace DIR [OPTIONS]  merge the DDP runtime's flight records (see --help)\n"
    "  dtlaunch job [OPTIONS] PROGRAM...  in a batch script: run the step, restart on spare "
    "nodes after a failure (see --help)\n\n"
    "Under srun every task execs PROGRAM with RANK, WORLD_SIZE, MASTER_ADDR, ... set from "
    "Slurm's environment; with --nproc-per-node dtlaunch spawns and supervises the workers "
    "itself.";

constexpr const char* kFooter = R"(Examples:
  srun -N3 --ntasks-per-node=8 --gpus-per-node=8 dtlaunch ./train --epochs 10
  srun -n4 dtlaunch --dry-run ./train          # print the environment each task would get
  dtlaunch --nproc-per-node 8 ./train          # one machine, no Slurm: spawn 8 workers
  dtlaunch --nnodes 2 --node-rank 0 --master-addr host0 --master-port 29500 \
           --nproc-per-node 8 ./train          # run the same on host1 with --node-rank 1
  dtlaunch hostnames 'gpu[001-003,007]'        # expand a Slurm hostlist
  dtlaunch hostlist gpu001 gpu002 gpu003       # compress host names

Exit status: 0 success; 2 bad command line, environment or hostlist (nothing started); 3 --preflight
found a problem (nothing started); 76 --watch: a peer was lost, the program was stopped; 126 program not executable; 127 program not found; 1 system error; in local mode the first
failed worker's status (128+N when killed by signal N). docs/cli.md has the details.)";

constexpr const char* kDoctorDescription =
    "Check that a job can start, starting nothing: every task reports to rank 0 at "
    "MASTER_ADDR:MASTER_PORT and rank 0 prints what would stop the job (docs/doctor.md).\n\n"
    "  srun <the job's options> dtlaunch doctor [OPTIONS] [PROGRAM [ARGS...]]\n"
    "  dtlaunch doctor --nproc-per-node N [OPTIONS] [PROGRAM [ARGS...]]";

// CLI11 reports bad usage with its own exit codes (100+); ours is 2, with one line.
int usage_error(std::string what) {
  for (char& c : what)
    if (c == '\n') c = ' ';
  while (!what.empty() && what.back() == ' ') what.pop_back();
  std::cerr << "dtlaunch: " << what << "\n";
  return static_cast<int>(ExitCode::kBadInput);
}

constexpr const char* kHostnamesHelp =
    R"(Expand Slurm hostlist expressions, one host per line (as 'scontrol show hostnames').

  dtlaunch hostnames [--] EXPR...

Every argument is an expression, taken verbatim ('[1-3]' and '-n1' too); a first '--' is
dropped, as scontrol does; --help alone prints this.

Examples:
  dtlaunch hostnames 'gpu[001-003,007]'        # gpu001 gpu002 gpu003 gpu007
  dtlaunch hostnames "$SLURM_JOB_NODELIST"     # the hosts of this job
  dtlaunch hostnames -- '[1-3]'                # 1 2 3

Exit status: 0 success; 2 bad expression (docs/hostlist.md).
)";

constexpr const char* kHostlistHelp =
    R"(Compress host names into one Slurm hostlist expression (as 'scontrol show hostlist').

  dtlaunch hostlist [--] NAME...

Every argument is taken verbatim (an argument may itself be a hostlist, or a comma-separated
list); a first '--' is dropped, as scontrol does; --help alone prints this.

Examples:
  dtlaunch hostlist gpu001 gpu002 gpu003 gpu007    # gpu[001-003,007]
  dtlaunch hostlist 'n[1-2]' n3                    # n[1-3]
  dtlaunch hostlist -- n1 n2                       # n[1-2]

Exit status: 0 success; 2 bad name or expression (docs/hostlist.md).
)";

// `dtlaunch hostnames ...` and `dtlaunch hostlist ...`, or nullopt for any other command line.
// Handled before CLI11, which would take a first "--" as its own and leave no expression.
std::optional<int> run_host_subcommand(int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  const std::string_view name = argv[1];
  if (name != "hostnames" && name != "hostlist") return std::nullopt;
  std::vector<std::string> args(argv + 2, argv + argc);
  const bool expand = name == "hostnames";
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << (expand ? kHostnamesHelp : kHostlistHelp);
    return 0;
  }
  if (!args.empty() && args.front() == "--") args.erase(args.begin());
  if (args.empty())
    return usage_error(expand ? "hostnames: no hostlist expression given (dtlaunch hostnames "
                                "'gpu[001-003]')"
                              : "hostlist: no host name given (dtlaunch hostlist gpu001 gpu002)");
  return expand ? dtlaunch::cli::run_hostnames(args, std::cout)
                : dtlaunch::cli::run_hostlist(args, std::cout);
}

// hostnames and hostlist take their arguments verbatim, as scontrol does: prefix_command()
// keeps CLI11 from reading "[1-3]" as a vector or "-n1" as an option (Slurm's hostlists begin
// with '[' and may begin with '-').
CLI::App* add_verbatim(CLI::App& app, const std::string& name, const std::string& help) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->prefix_command();
  return sub;
}

int run(int argc, char** argv) {
  using namespace dtlaunch;
  if (const auto status = run_host_subcommand(argc, argv)) return *status;
  CLI::App app{kDescription, "dtlaunch"};
  app.footer(kFooter);
  app.prefix_command();  // everything from PROGRAM on belongs to the program, untouched
  app.set_version_flag("--version", std::string("dtlaunch ") + DTLAUNCH_VERSION);
  LaunchCommand launch, doctor;
  add_launch_options(app, launch, false);
  CLI::App* doctor_app = app.add_subcommand("doctor", kDoctorDescription);
  doctor_app->prefix_command();
  doctor_app->footer("Exit status: 0 healthy (warnings allowed), 3 a problem found, 2 bad input.");
  add_launch_options(*doctor_app, doctor, true);
  // Listed in --help; run_host_subcommand has run them already.
  add_verbatim(app, "hostnames",
               "expand Slurm hostlist expressions, one host per line (as 'scontrol show "
               "hostnames')");
  add_verbatim(app, "hostlist",
               "compress host names into one Slurm hostlist expression (as 'scontrol show "
               "hostlist')");
  CLI::App* env_table = add_verbatim(
      app, "env-table",
      "print the Markdown tables of the variables dtlaunch exports, removes and reads");
  TraceCommand trace;
  CLI::App* trace_app = add_trace_options(app, trace);
  JobCommand job;
  CLI::App* job_app = add_job_options(app, job);
  // A subcommand is one only as the first argument: in `dtlaunch -- hostlist` or
  // `dtlaunch -v hostlist` it is the program's name.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    sub->disabled(argc < 2 || sub->get_name() != argv[1]);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  if (env_table->parsed()) {
    if (!env_table->remaining().empty())
      return usage_error("env-table takes no arguments, got '" +
                         core::excerpt(env_table->remaining().front()) + "'");
    return cli::run_env_table(std::cout);
  }
  if (trace_app->parsed()) {
    // CLI11 hands what it cannot place (a second DIR, anything after a "--" that ends the
    // options) to the parent or the subcommand as "remaining": trace takes one DIR, nothing else.
    std::vector<std::string> extra = app.remaining();
    for (const std::string& arg : trace_app->remaining()) extra.push_back(arg);
    for (const std::string& arg : extra)
      if (arg != "--")
        return usage_error("trace takes one DIR, got also '" + core::excerpt(arg) + "'");
    return cli::run_trace_command(trace, std::cout, std::cerr);
  }
  if (job_app->parsed()) return run_job_command(app, *job_app, job, environ);
  LaunchCommand& command = doctor_app->parsed() ? doctor : launch;
  // CLI11 hands a "--" that comes before the subcommand's first positional, and all after it,
  // back to the parent: `dtlaunch doctor --timeout 5 -- PROGRAM` leaves PROGRAM in app's.
  const bool own_program = doctor_app->parsed() && !doctor_app->remaining().empty();
  command.options.argv = program_argv(own_program ? *doctor_app : app);
  return cli::run_launch(command.options, command.flags, core::EnvMap::from_environ(environ),
                         std::cout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const dtlaunch::core::Error& e) {
    std::cerr << "dtlaunch: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "dtlaunch: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kFailure);
  }
}
