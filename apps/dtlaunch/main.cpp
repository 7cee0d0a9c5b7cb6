// dtlaunch's command line: parse, call lib/, turn the one error type into an exit status.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstring>
#include <iostream>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

extern char** environ;

namespace {

constexpr const char* kFooter = R"(Examples:
  srun -N3 --ntasks-per-node=8 --gpus-per-node=8 dtlaunch ./train --epochs 10
  srun -n4 dtlaunch --dry-run ./train          # print the environment each task would get
  dtlaunch --nproc-per-node 8 ./train          # one machine, no Slurm: spawn 8 workers
  dtlaunch --nnodes 2 --node-rank 0 --master-addr host0 --master-port 29500 \
           --nproc-per-node 8 ./train          # run the same on host1 with --node-rank 1
  dtlaunch hostnames 'gpu[001-003,007]'        # expand a Slurm hostlist
  dtlaunch hostlist gpu001 gpu002 gpu003       # compress host names

Exit status: 0 success; 2 bad command line, environment or hostlist (nothing started); 3 --preflight
found a problem (nothing started); 126 program not executable; 127 program not found; 1 system error; in local mode the first
failed worker's status (128+N when killed by signal N). docs/cli.md has the details.)";

// CLI11 reports bad usage with its own exit codes (100+); ours is 2, with one line.
int usage_error(const std::string& what) {
  std::cerr << "dtlaunch: " << what << "\n";
  return static_cast<int>(dtlaunch::ExitCode::kBadInput);
}

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

constexpr const char* kSubcommandHelp[][2] = {
    {"hostnames",
     "dtlaunch hostnames EXPR...: expand Slurm hostlist expressions, one host per "
     "line (as 'scontrol show hostnames')"},
    {"hostlist",
     "dtlaunch hostlist NAME...: compress host names into one Slurm hostlist "
     "expression (as 'scontrol show hostlist')"},
    {"env-table",
     "dtlaunch env-table: print the Markdown table of the variables dtlaunch exports "
     "and removes"},
};

// The subcommands take their arguments verbatim, as scontrol does: not through CLI11, which
// reads "[a,b]" as a vector and "-n1" as an option (Slurm's hostlists begin with '[' and may
// begin with '-').
int run_subcommand(const std::string& name, const std::vector<std::string>& args) {
  const char* help = "";
  for (const auto& entry : kSubcommandHelp)
    if (name == entry[0]) help = entry[1];
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << help << "\n";
    return 0;
  }
  if (name == "env-table") {
    if (!args.empty())
      return usage_error("env-table takes no arguments, got '" + dtlaunch::excerpt(args[0]) + "'");
    return dtlaunch::run_env_table(std::cout);
  }
  if (args.empty())
    return usage_error(name + ": " +
                       (name == "hostnames" ? "no hostlist expression given (dtlaunch hostnames "
                                              "'gpu[001-003]')"
                                            : "no host name given (dtlaunch hostlist gpu001 "
                                              "gpu002)"));
  if (name == "hostnames") return dtlaunch::run_hostnames(args, std::cout);
  return dtlaunch::run_hostlist(args, std::cout);
}

// Numbers are taken as text and parsed here, so that an error quotes what the user typed
// ("--master-port='99999999999999999999'"), not CLI11's conversion of it.
std::uint32_t count_option(const char* flag, const std::string& text, std::uint64_t min,
                           std::uint64_t max) {
  auto value = dtlaunch::parse_uint(text, max);
  if (!value || *value < min)
    throw dtlaunch::Error::bad_env(
        flag, text, "expected an integer in " + std::to_string(min) + ".." + std::to_string(max));
  return static_cast<std::uint32_t>(*value);
}

std::chrono::milliseconds seconds_option(const char* flag, const std::string& text,
                                         double max_seconds) {
  double seconds = -1;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, seconds);
  if (text.empty() || ec != std::errc{} || stop != end || !(seconds >= 0) ||
      !(seconds <= max_seconds))
    throw dtlaunch::Error::bad_env(
        flag, text, "expected seconds in 0.." + std::to_string(static_cast<long>(max_seconds)));
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

int run_launcher(int argc, char** argv, bool doctor) {
  using namespace dtlaunch;
  CLI::App app{
      "Launch distributed PyTorch/LibTorch workers under Slurm or locally.\n\n"
      "  dtlaunch [OPTIONS] [--] PROGRAM [ARGS...]\n"
      "  dtlaunch hostnames EXPR...    expand Slurm hostlists, one host per line\n"
      "  dtlaunch hostlist NAME...     compress host names into a hostlist\n"
      "  dtlaunch env-table            the table of exported and removed variables\n"
      "  dtlaunch doctor [OPTIONS] [PROGRAM...]   check that the job can start (see --help)\n\n"
      "Under srun every task execs PROGRAM with RANK, WORLD_SIZE, MASTER_ADDR, ... set "
      "from Slurm's environment; with --nproc-per-node dtlaunch spawns and supervises "
      "the workers itself.",
      "dtlaunch"};
  app.footer(kFooter);
  app.prefix_command();  // everything from PROGRAM on belongs to the program, untouched
  app.set_version_flag("--version", std::string("dtlaunch ") + DTLAUNCH_VERSION);

  LaunchOptions options;
  RunFlags flags;
  std::string mode = "auto", gpu_bind = "share", format = "shell";
  std::string nproc, nnodes, node_rank, max_restarts = "0", master_port, gpus_per_node;
  std::string grace = "30", master_addr, log_dir, port_range, run_id, cpu_bind, mem_bind;

  std::string check_timeout = "60";
  bool preflight = false;
  if (doctor) {
    app.description(
        "Check that a job can start, starting nothing: every task reports to rank 0 at "
        "MASTER_ADDR:MASTER_PORT and rank 0 prints what would stop the job (docs/doctor.md).\n\n"
        "  srun <the job's options> dtlaunch doctor [OPTIONS] [PROGRAM [ARGS...]]\n"
        "  dtlaunch doctor --nproc-per-node N [OPTIONS] [PROGRAM [ARGS...]]");
    app.name("dtlaunch doctor");
    app.footer("Exit status: 0 healthy (warnings allowed), 3 a problem found, 2 bad input.");
    format = "table";
    app.add_option("--timeout", check_timeout, "seconds to wait for every task (default 60)")
        ->type_name("SECONDS");
    app.add_option("--format", format, "report format: table (default) or json")
        ->check(CLI::IsMember({"table", "json"}));
  } else {
    app.add_flag("--dry-run", flags.dry_run, "print the environment changes and argv, then exit 0");
    app.add_option("--format", format, "--dry-run output: shell (export lines) or json")
        ->check(CLI::IsMember({"shell", "json"}));
    app.add_flag("--preflight", preflight,
                 "run dtlaunch doctor's checks first; start the program only if they pass "
                 "(exit 3 otherwise)");
    app.add_option("--preflight-timeout", check_timeout,
                   "seconds the preflight waits for every task (default 60)")
        ->type_name("SECONDS");
  }
  app.add_flag("-v,--verbose", flags.verbose,
               "log every decision to stderr, prefixed with the rank");
  app.add_option("--mode", mode,
                 "auto (default): Slurm inside an srun step, local with "
                 "--nproc-per-node; or force slurm / local")
      ->check(CLI::IsMember({"auto", "slurm", "local"}));
  app.add_option("--master-addr", master_addr,
                 "address of rank 0's host (default: the node of "
                 "rank 0; local standalone: 127.0.0.1)")
      ->type_name("HOST");
  app.add_option("--master-port", master_port,
                 "rendezvous port (default: hashed from job and "
                 "step ids; local standalone: a free port)")
      ->type_name("PORT");
  app.add_option("--port-range", port_range,
                 "LO-HI range for the hashed port (default "
                 "20000-32767; also DTLAUNCH_PORT_RANGE)")
      ->type_name("LO-HI");
  app.add_option("--gpu-bind", gpu_bind,
                 "share (default): keep all GPUs visible and export "
                 "DTLAUNCH_CUDA_DEVICE; isolate: narrow CUDA_VISIBLE_DEVICES to one GPU; none")
      ->check(CLI::IsMember({"share", "isolate", "none"}));
  app.add_option("--cpu-bind", cpu_bind,
                 "none (default), numa, socket, exclusive or cache: the CPUs of each rank, "
                 "near its GPU, within what Slurm gave the task (also DTLAUNCH_CPU_BIND)")
      ->check(CLI::IsMember({"none", "numa", "socket", "exclusive", "cache"}));
  app.add_option("--mem-bind", mem_bind,
                 "none, local (prefer the NUMA nodes of the bound CPUs; the default with "
                 "--cpu-bind) or strict (allocate only there) (also DTLAUNCH_MEM_BIND)")
      ->check(CLI::IsMember({"none", "local", "strict"}));
  app.add_option("--gpus-per-node", gpus_per_node,
                 "GPUs on this node (default: "
                 "CUDA_VISIBLE_DEVICES, else /dev/nvidiaN)")
      ->type_name("N");
  app.add_flag("--allow-gpu-sharing", options.allow_gpu_sharing,
               "allow more local ranks than GPUs (ranks share GPUs round-robin)");
  app.add_flag("--export-run-id", options.export_run_id,
               "export TORCHELASTIC_RUN_ID (PyTorch Lightning then acts as under torchrun and "
               "turns off its Slurm requeue)");
  app.add_option("--run-id", run_id,
                 "value of TORCHELASTIC_RUN_ID (default: the job id); with --nnodes > 1 it also "
                 "names the run in DTLAUNCH_RUN_ID (pass the same on every launcher)")
      ->type_name("ID");
  app.add_option("--nproc-per-node", nproc, "local mode: spawn and supervise N workers")
      ->type_name("N");
  app.add_option("--nnodes", nnodes, "local mode: number of machines, one dtlaunch each")
      ->type_name("N");
  app.add_option("--node-rank", node_rank, "local mode: index of this machine, 0..nnodes-1")
      ->type_name("R");
  app.add_option("--max-restarts", max_restarts, "local mode: restart the group up to K times")
      ->type_name("K");
  app.add_option("--grace", grace,
                 "local mode: seconds between SIGTERM and SIGKILL "
                 "when stopping workers (default 30)")
      ->type_name("SECONDS");
  app.add_option("--log-dir", log_dir,
                 "local mode: also write each rank's output to "
                 "DIR/rank-N.log")
      ->type_name("DIR");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(one_line(e.what()));
  }

  options.mode = mode == "slurm" ? Mode::kSlurm : mode == "local" ? Mode::kLocal : Mode::kAuto;
  options.gpu_bind = gpu_bind == "isolate" ? GpuBind::kIsolate
                     : gpu_bind == "none"  ? GpuBind::kNone
                                           : GpuBind::kShare;
  flags.format = format == "json" ? OutputFormat::kJson : OutputFormat::kShell;
  if (app.count("--master-addr")) options.master_addr = master_addr;
  if (app.count("--master-port"))
    options.master_port =
        static_cast<std::uint16_t>(count_option("--master-port", master_port, 1, 65535));
  if (app.count("--port-range")) options.port_range = port_range;
  if (app.count("--cpu-bind")) options.cpu_bind = parse_cpu_bind(cpu_bind);
  if (app.count("--mem-bind")) options.mem_bind = parse_mem_bind(mem_bind);
  if (app.count("--gpus-per-node"))
    options.gpus_per_node = count_option("--gpus-per-node", gpus_per_node, 0, 1024);
  if (app.count("--run-id")) options.run_id = run_id;
  if (app.count("--nproc-per-node"))
    options.nproc_per_node = count_option("--nproc-per-node", nproc, 1, 4096);
  if (app.count("--nnodes")) options.nnodes = count_option("--nnodes", nnodes, 1, 1 << 20);
  if (app.count("--node-rank"))
    options.node_rank = count_option("--node-rank", node_rank, 0, 1 << 20);
  options.max_restarts = count_option("--max-restarts", max_restarts, 0, 1000);
  options.grace = seconds_option("--grace", grace, 86400);
  flags.check = doctor ? Check::kDoctor : preflight ? Check::kPreflight : Check::kNone;
  flags.check_json = format == "json";
  flags.check_timeout =
      seconds_option(doctor ? "--timeout" : "--preflight-timeout", check_timeout, 86400);
  options.program_optional = doctor;
  if (app.count("--log-dir")) options.log_dir = log_dir;
  options.argv = app.remaining();
  if (!options.argv.empty() && options.argv.front() == "--") {
    options.argv.erase(options.argv.begin());
  } else if (!options.argv.empty() && options.argv.front().size() > 1 &&
             options.argv.front().front() == '-') {
    // prefix_command() hands an unknown option over as the program name; a typo in an option
    // must not become "command not found" (a program named "-x" goes after "--").
    throw Error::usage("unknown option " + excerpt(options.argv.front()) +
                       " (see dtlaunch --help)");
  }

  return run_launch(options, flags, EnvMap::from_environ(environ), std::cout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2)
      for (const auto& entry : kSubcommandHelp)
        if (std::strcmp(argv[1], entry[0]) == 0)
          return run_subcommand(argv[1], std::vector<std::string>(argv + 2, argv + argc));
    if (argc >= 2 && std::strcmp(argv[1], "doctor") == 0)
      return run_launcher(argc - 1, argv + 1, true);
    return run_launcher(argc, argv, false);
  } catch (const dtlaunch::Error& e) {
    std::cerr << "dtlaunch: " << e.what() << "\n";
    return e.exit_status();
  } catch (const std::exception& e) {
    std::cerr << "dtlaunch: internal error: " << e.what() << "\n";
    return static_cast<int>(dtlaunch::ExitCode::kFailure);
  }
}
