// `dtlaunch doctor [OPTIONS] [PROGRAM [ARGS...]]`: a launch's checks, starting nothing
// (docs/doctor.md). It takes the launch's options (launch_command.cpp) and its own.
#include <iostream>

#include "core/env_map.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

namespace {

constexpr const char* kDoctorDescription =
    "Check that a job can start, starting nothing: every task reports to rank 0 at "
    "MASTER_ADDR:MASTER_PORT and rank 0 prints what would stop the job (docs/doctor.md).\n\n"
    "  srun <the job's options> dtlaunch doctor [OPTIONS] [PROGRAM [ARGS...]]\n"
    "  dtlaunch doctor --nproc-per-node N [OPTIONS] [PROGRAM [ARGS...]]";

// How long to wait, the report's format, the network test.
void add_doctor_options(CLI::App& app, cli::RunFlags& flags) {
  flags.check = cli::Check::kDoctor;
  add_choice(app, "--format", flags.check_json, kTableOrJson,
             "report format: table (default) or json");
  app.add_flag("--network", flags.check_network,
               "after the check-in, measure latency and TCP throughput between the nodes "
               "(ring neighbours and a few random peers) and flag slow ones");
  add_check_budgets(app, flags, "--", "the checks");
}

}  // namespace

CLI::App* add_doctor_command(CLI::App& app, LaunchCommand& command) {
  CLI::App* sub = app.add_subcommand("doctor", kDoctorDescription);
  sub->prefix_command();
  sub->footer("Exit status: 0 healthy (warnings allowed), 3 a problem found, 2 bad input.");
  command.options.program_optional = true;
  add_doctor_options(*sub, command.flags);
  add_shared_launch_options(*sub, command);
  return sub;
}

int run_doctor_command(const CLI::App& app, const CLI::App& doctor_app, LaunchCommand& command,
                       char** environ_vars) {
  // CLI11 hands a "--" that comes before the subcommand's first positional, and all after it,
  // back to the parent: `dtlaunch doctor --timeout 5 -- PROGRAM` leaves PROGRAM in app's.
  command.options.argv = program_argv(doctor_app.remaining().empty() ? app : doctor_app);
  return cli::run_launch(command.options, command.flags, core::EnvMap::from_environ(environ_vars),
                         std::cout);
}

}  // namespace dtlaunch
