// `dtlaunch job [OPTIONS] [--] PROGRAM [ARGS...]`: the restart driver's command line (lib/job,
// docs/resilience.md).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <iostream>

#include "core/env_map.hpp"
#include "core/error.hpp"
#include "job/driver.hpp"
#include "job/job.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

namespace {

// The tasks run the same dtlaunch as the driver: the batch script's, on a shared file system.
std::string own_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw core::Error::system("cannot read /proc/self/exe (the path of dtlaunch)", errno);
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

CLI::App* add_job_command(CLI::App& app, JobCommand& command) {
  CLI::App* sub = app.add_subcommand(
      "job",
      "Run PROGRAM on N nodes of the batch job's allocation and keep K as spares: after a "
      "failure, exclude the node that caused it and start again on the others plus a spare, "
      "within one restart budget (docs/resilience.md). Runs once in the batch script, not under "
      "srun.\n\n  dtlaunch job [OPTIONS] [--] PROGRAM [ARGS...]");
  sub->prefix_command();
  sub->footer(
      "Exit status: 0 done; 75 preempted (never retried, for --requeue); 2 bad input (not "
      "retried); otherwise the status of the last failure (3 preflight, 76 peer lost, the "
      "program's own) when the budget or the spares ran out.");
  job::JobOptions& o = command.options;
  add_count(*sub, "--nodes", o.nodes, 1, 1 << 20, "nodes to run on (default: all but the spares)");
  add_count(*sub, "--spare-nodes", o.spare_nodes, 0, 1 << 20,
            "nodes kept aside to replace failed ones (default: the rest of the allocation with "
            "--nodes, else 0)");
  add_count(*sub, "--min-nodes", o.min_nodes, 1, 1 << 20,
            "go on with fewer nodes, down to N, when the spares are used up (only for programs "
            "that can change their world size; default: --nodes)");
  add_count(*sub, "--max-restarts", o.max_restarts, 0, 1000,
            "restarts for the whole job, all nodes together (default 3)")
      ->type_name("R");
  add_count(*sub, "--ntasks-per-node", o.tasks_per_node, 1, 4096,
            "tasks on each node (default: the allocation's)");
  add_seconds(*sub, "--stop-grace", o.stop_grace,
              "seconds after the first failure or a signal before a step that does not end is "
              "aborted, then cancelled with scancel (default 30)");
  sub->add_option_function<std::string>(
         "--no-retry-exit",
         [&o](const std::string& text) {
           o.no_retry_exits = job::parse_exit_statuses("--no-retry-exit", text);
         },
         "the program's exit statuses that a restart cannot fix, e.g. 3,10-12: a task that "
         "exits with one ends the job with that status")
      ->type_name("CODES");
  sub->add_flag("--watch", o.watch,
                "run each task as dtlaunch --watch PROGRAM (programs without dtlaunch's runtime, "
                "Python included)");
  sub->add_flag("--live", o.live,
                "one step per node: a lost node's ranks start again on a spare while the others "
                "keep running, with the state sent from a survivor (programs on dtlaunch's DDP "
                "runtime that use LiveRun; docs/resilience.md)");
  sub->add_option("--store-program", o.store_program,
                  "--live: the program that hosts the job's store on the batch host (default: "
                  "dtlaunch-store from PATH)")
      ->type_name("PATH");
  sub->add_option("--srun-arg", o.srun_args, "an argument for srun, verbatim (repeatable)")
      ->type_name("ARG")
      ->allow_extra_args(false);
  sub->add_option("--task-arg", o.launch_args,
                  "an option for each task's dtlaunch, verbatim (repeatable): --task-arg "
                  "--gpu-bind=isolate")
      ->type_name("ARG")
      ->allow_extra_args(false);
  add_choice(*sub, "--format", command.json, kTableOrJson,
             "summary: table (default, on stderr) or json (one line on stdout at the end)");
  return sub;
}

int run_job_command(const CLI::App& app, const CLI::App& job_app, JobCommand& command,
                    char** environ_vars) {
  // CLI11 hands a "--" before the subcommand's first positional, and all after it, back to the
  // parent (as for doctor).
  command.options.program = program_argv(job_app.remaining().empty() ? app : job_app);
  return job::run_job(command.options, own_path(), command.json,
                      core::EnvMap::from_environ(environ_vars), std::cerr);
}

}  // namespace dtlaunch
