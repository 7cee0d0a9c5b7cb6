// `dtlaunch [OPTIONS] [--] PROGRAM [ARGS...]`, the top-level command: the launch's options, and
// those it shares with `dtlaunch doctor`.
#include <iostream>

#include "core/env_map.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

namespace {

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

CLI::Option* add_text(CLI::App& app, const std::string& flag, std::optional<std::string>& target,
                      const std::string& help, const std::string& type_name) {
  return app.add_option(flag, target, help)->type_name(type_name);
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

void add_check_budgets(CLI::App& app, cli::RunFlags& flags, const std::string& prefix,
                       const std::string& checks) {
  add_seconds(app, prefix + "timeout", flags.check_timeout,
              "seconds " + checks + " wait for every task (default 60)");
  add_seconds(app, prefix + "network-budget", flags.network_budget,
              "seconds the network test of " + checks + " takes, all nodes at once (default 2)");
}

void add_shared_launch_options(CLI::App& app, LaunchCommand& command) {
  launch::LaunchOptions& options = command.options;
  app.add_flag("-v,--verbose", command.flags.verbose,
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
  add_text(app, "--job-node", options.job_node,
           "this srun step is node I of a job of N nodes, one step per node (dtlaunch job --live "
           "runs them): ranks I*T.. of N*T for the step's T tasks; needs MASTER_ADDR and "
           "MASTER_PORT",
           "I/N");
  add_local_mode_options(app, options);
}

void add_launch_command(CLI::App& app, LaunchCommand& command) {
  app.description(kDescription);
  app.footer(kFooter);
  app.prefix_command();  // everything from PROGRAM on belongs to the program, untouched
  add_run_options(app, command.flags);
  add_shared_launch_options(app, command);
}

int run_launch_command(const CLI::App& app, LaunchCommand& command, char** environ_vars) {
  command.options.argv = program_argv(app);
  return cli::run_launch(command.options, command.flags, core::EnvMap::from_environ(environ_vars),
                         std::cout);
}

}  // namespace dtlaunch
