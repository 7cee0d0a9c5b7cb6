#include "command_line.hpp"

#include "core/error.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch {

namespace {

// Numbers are taken as text and converted by lib's parser, so that an error quotes what the
// user typed ("--master-port='99999999999999999999': expected an integer in 1..65535").
template <class T>
struct Number {
  using type = T;
};
template <class T>
struct Number<std::optional<T>> {
  using type = T;
};

template <class T>
CLI::Option* add_count(CLI::App& app, const std::string& flag, T& target, std::uint64_t min,
                       std::uint64_t max, const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag,
          [&target, flag, min, max](const std::string& text) {
            target = static_cast<typename Number<T>::type>(core::parse_count(flag, text, min, max));
          },
          help)
      ->type_name("N");
}

template <class T>
CLI::Option* add_seconds(CLI::App& app, const std::string& flag, T& target,
                         const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag,
          [&target, flag](const std::string& text) {
            target = core::parse_seconds(flag, text, 86400);
          },
          help)
      ->type_name("SECONDS");
}

CLI::Option* add_text(CLI::App& app, const std::string& flag, std::optional<std::string>& target,
                      const std::string& help, const std::string& type_name) {
  return app.add_option(flag, target, help)->type_name(type_name);
}

// How long the checks wait for every task, and how long their network test takes: `dtlaunch
// doctor`'s --timeout and --network-budget, a launch's --preflight-timeout and
// --preflight-network-budget. `checks` names them in the help ("the preflight").
void add_check_budgets(CLI::App& app, cli::RunFlags& flags, const std::string& prefix,
                       const std::string& checks) {
  add_seconds(app, prefix + "timeout", flags.check_timeout,
              "seconds " + checks + " wait for every task (default 60)");
  add_seconds(app, prefix + "network-budget", flags.network_budget,
              "seconds the network test of " + checks + " takes, all nodes at once (default 2)");
}

// `dtlaunch doctor`: how long to wait, the report's format, the network test.
void add_doctor_options(CLI::App& app, cli::RunFlags& flags) {
  flags.check = cli::Check::kDoctor;
  add_choice(app, "--format", flags.check_json, kTableOrJson,
             "report format: table (default) or json");
  app.add_flag("--network", flags.check_network,
               "after the check-in, measure latency and TCP throughput between the nodes "
               "(ring neighbours and a few random peers) and flag slow ones");
  add_check_budgets(app, flags, "--", "the checks");
}

// What a launch does besides starting the program: --dry-run, the preflight checks, --watch.
void add_run_options(CLI::App& app, cli::RunFlags& flags) {
  app.add_flag("--dry-run", flags.dry_run, "print the environment changes and argv, then exit 0");
  // json also makes --preflight's report json.
  add_choice_function(
      app, "--format", cli::kOutputFormatNames,
      [&flags](cli::OutputFormat format) {
        flags.format = format;
        flags.check_json = format == cli::OutputFormat::kJson;
      },
      "--dry-run output: shell (export lines) or json");
  app.add_flag_callback(
      "--preflight", [&flags] { flags.check = cli::Check::kPreflight; },
      "run dtlaunch doctor's checks first; start the program only if they pass (exit 3 "
      "otherwise)");
  app.add_flag_callback(
      "--preflight-network",
      [&flags] {
        flags.check = cli::Check::kPreflight;
        flags.check_network = true;
      },
      "--preflight with the network test between the nodes (dtlaunch doctor --network)");
  add_check_budgets(app, flags, "--preflight-", "the preflight checks");
  app.add_flag("--watch", flags.watch,
               "under srun: stay the program's parent and join a heartbeat with the other "
               "tasks; a lost node stops the program and dtlaunch exits 76");
  add_seconds(app, "--watch-timeout", flags.watch_timeout,
              "--watch: seconds of silence after which a peer is lost (default 10, at least 3)");
}

// Where rank 0 listens: the mode, MASTER_ADDR and MASTER_PORT.
void add_rendezvous_options(CLI::App& app, launch::LaunchOptions& options) {
  add_choice(app, "--mode", options.mode, launch::kModeNames,
             "auto (default): Slurm inside an srun step, local with --nproc-per-node; or force "
             "slurm / local");
  add_text(app, "--master-addr", options.master_addr,
           "address of rank 0's host (default: the node of rank 0; local standalone: 127.0.0.1)",
           "HOST");
  add_count(app, "--master-port", options.master_port, 1, 65535,
            "rendezvous port (default: hashed from job and step ids; local standalone: a free "
            "port)")
      ->type_name("PORT");
  add_text(app, "--port-range", options.port_range,
           "LO-HI range for the hashed port (default 20000-32767; also DTLAUNCH_PORT_RANGE)",
           "LO-HI");
}

// Which GPU, CPUs and memory each rank gets.
void add_binding_options(CLI::App& app, launch::LaunchOptions& options) {
  add_choice(app, "--gpu-bind", options.gpu_bind, launch::kGpuBindNames,
             "share (default): keep all GPUs visible and export DTLAUNCH_CUDA_DEVICE; isolate: "
             "narrow CUDA_VISIBLE_DEVICES to one GPU; none");
  add_choice(app, "--cpu-bind", options.cpu_bind, affinity::kCpuBindNames,
             "none (default), numa, socket, exclusive or cache: the CPUs of each rank, near its "
             "GPU, within what Slurm gave the task (also DTLAUNCH_CPU_BIND)");
  add_choice(app, "--mem-bind", options.mem_bind, affinity::kMemBindNames,
             "none, local (prefer the NUMA nodes of the bound CPUs; the default with --cpu-bind) "
             "or strict (allocate only there) (also DTLAUNCH_MEM_BIND)");
  add_count(app, "--gpus-per-node", options.gpus_per_node, 0, 1024,
            "GPUs on this node (default: CUDA_VISIBLE_DEVICES, else SLURM_STEP_GPUS or "
            "SLURM_JOB_GPUS, else /dev/nvidiaN)");
  app.add_flag("--allow-gpu-sharing", options.allow_gpu_sharing,
               "allow more local ranks than GPUs (ranks share GPUs round-robin)");
}

// Spawning and supervising the workers without Slurm.
void add_local_mode_options(CLI::App& app, launch::LaunchOptions& options) {
  add_count(app, "--nproc-per-node", options.nproc_per_node, 1, 4096,
            "local mode: spawn and supervise N workers");
  add_count(app, "--nnodes", options.nnodes, 1, 1 << 20,
            "local mode: number of machines, one dtlaunch each");
  add_count(app, "--node-rank", options.node_rank, 0, 1 << 20,
            "local mode: index of this machine, 0..nnodes-1")
      ->type_name("R");
  add_count(app, "--max-restarts", options.max_restarts, 0, 1000,
            "local mode: restart the group up to K times")
      ->type_name("K");
  add_seconds(app, "--grace", options.grace,
              "local mode and --watch: seconds between SIGTERM and SIGKILL when stopping "
              "workers (default 30)");
  add_text(app, "--log-dir", options.log_dir,
           "local mode: also write each rank's output to DIR/rank-N.log", "DIR");
}

}  // namespace

void add_launch_options(CLI::App& app, LaunchCommand& command, bool doctor) {
  launch::LaunchOptions& options = command.options;
  cli::RunFlags& flags = command.flags;
  options.program_optional = doctor;
  if (doctor)
    add_doctor_options(app, flags);
  else
    add_run_options(app, flags);
  app.add_flag("-v,--verbose", flags.verbose,
               "log every decision to stderr, prefixed with the rank");
  add_rendezvous_options(app, options);
  add_binding_options(app, options);
  app.add_flag("--export-run-id", options.export_run_id,
               "export TORCHELASTIC_RUN_ID (PyTorch Lightning then acts as under torchrun and "
               "turns off its Slurm requeue)");
  add_text(app, "--run-id", options.run_id,
           "value of TORCHELASTIC_RUN_ID (default: the job id); with --nnodes > 1 it also names "
           "the run in DTLAUNCH_RUN_ID (pass the same on every launcher)",
           "ID");
  add_local_mode_options(app, options);
}

std::vector<std::string> program_argv(const CLI::App& app) {
  std::vector<std::string> argv = app.remaining();
  if (!argv.empty() && argv.front() == "--") {
    argv.erase(argv.begin());
  } else if (!argv.empty() && argv.front().size() > 1 && argv.front().front() == '-') {
    // prefix_command() hands an unknown option over as the program name; a typo in an option
    // must not become "command not found" (a program named "-x" goes after "--").
    throw core::Error::usage("unknown option " + core::excerpt(argv.front()) +
                             " (see dtlaunch --help)");
  }
  return argv;
}

CLI::App* add_trace_options(CLI::App& app, TraceCommand& command) {
  CLI::App* sub = app.add_subcommand(
      "trace",
      "Merge the flight records every rank of a DDP job wrote into DIR (DTLAUNCH_DDP_TRACE_DIR): "
      "the first collective where the ranks diverge, who never entered it and who waits, "
      "mismatches, stragglers (docs/cli.md).\n\n  dtlaunch trace DIR [OPTIONS]");
  sub->footer(
      "Exit status: 0 the ranks agree and nobody straggles; 3 a problem found; 66 no readable "
      "flight record in DIR; 2 bad input.");
  sub->add_option("DIR", command.dir, "the directory of the rank files")->required();
  add_choice(*sub, "--format", command.format, trace::kTraceFormatNames,
             "text (default), json, or chrome (a Chrome-trace / Perfetto timeline on stdout; the "
             "verdict on stderr)");
  sub->add_option("--html", command.html,
                  "also write a self-contained HTML timeline (one track per rank) to this file");
  sub->add_option("--run", command.run_id,
                  "the run id whose files to read (default: the run of the newest file)");
  return sub;
}

}  // namespace dtlaunch
