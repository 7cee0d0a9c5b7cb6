// dtlaunch's command line: one file per command (subcommands.hpp) declares its options and runs
// it; here they are registered, the command line parsed and the parsed command run, and the one
// error type of lib/ turned into an exit status.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "core/error.hpp"
#include "subcommands.hpp"

extern char** environ;

namespace {

int run(int argc, char** argv) {
  using namespace dtlaunch;
  for (const VerbatimCommand* verbatim : {&kHostnamesCommand, &kHostlistCommand})
    if (const auto status = run_verbatim(*verbatim, argc, argv)) return *status;
  CLI::App app{"", "dtlaunch"};
  app.set_version_flag("--version", std::string("dtlaunch ") + DTLAUNCH_VERSION);
  LaunchCommand launch, doctor;
  add_launch_command(app, launch);
  CLI::App* doctor_app = add_doctor_command(app, doctor);
  // Listed in --help; run_verbatim has run them already.
  for (const VerbatimCommand* verbatim : {&kHostnamesCommand, &kHostlistCommand})
    add_verbatim(app, verbatim->name, verbatim->summary);
  CLI::App* env_table_app = add_env_table_command(app);
  trace::TraceOptions trace;
  CLI::App* trace_app = add_trace_command(app, trace);
  JobCommand job;
  CLI::App* job_app = add_job_command(app, job);
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

  if (env_table_app->parsed()) return run_env_table_command(*env_table_app);
  if (trace_app->parsed()) return run_trace_command(app, *trace_app, trace);
  if (job_app->parsed()) return run_job_command(app, *job_app, job, environ);
  if (doctor_app->parsed()) return run_doctor_command(app, *doctor_app, doctor, environ);
  return run_launch_command(app, launch, environ);
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
    return static_cast<int>(dtlaunch::core::ExitCode::kFailure);
  }
}
