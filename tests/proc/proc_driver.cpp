// A test harness for lib/proc before (and besides) the launcher: starts --nproc copies of a
// program through run_workers with the worker contract written by to_env, and exits with the
// RunResult's status. It decides nothing the launcher decides; it only feeds the supervisor.
//   proc_driver --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//               [--grace SECONDS]
//               [--max-restarts K] [--log-dir DIR] -- PROGRAM ARGS...
// The options are spelled as dtlaunch's, so that one test can run either binary.
// Prints "proc_driver: exit_status=S restarts=K" on stderr at the end.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "contract/contract.hpp"
#include "core/env_map.hpp"
#include "core/error.hpp"
#include "core/parse.hpp"
#include "launch/system.hpp"
#include "proc/supervisor.hpp"

extern char** environ;

namespace {

using dtlaunch::core::Error;

std::string resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return program;
}

int run(int argc, char** argv) {
  std::uint32_t nproc = 1, nnodes = 1, node_rank = 0;
  std::optional<std::uint16_t> port;
  std::string addr = "127.0.0.1";
  dtlaunch::proc::SupervisorOptions options;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) throw Error::usage(arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--nproc-per-node") {
      nproc = static_cast<std::uint32_t>(dtlaunch::core::parse_uint_var(arg, value, 4096));
    } else if (arg == "--nnodes") {
      nnodes = static_cast<std::uint32_t>(dtlaunch::core::parse_uint_var(arg, value, 4096));
    } else if (arg == "--node-rank") {
      node_rank = static_cast<std::uint32_t>(dtlaunch::core::parse_uint_var(arg, value, 4096));
    } else if (arg == "--master-addr") {
      addr = value;
    } else if (arg == "--master-port") {
      port = static_cast<std::uint16_t>(dtlaunch::core::parse_uint_var(arg, value, 65535));
    } else if (arg == "--grace") {
      options.grace = dtlaunch::core::parse_seconds(arg, value, 86400);
    } else if (arg == "--max-restarts") {
      options.max_restarts = static_cast<std::uint32_t>(dtlaunch::core::parse_uint_var(arg, value));
    } else if (arg == "--log-dir") {
      options.log_dir = value;
    } else {
      throw Error::usage("unknown option " + arg);
    }
  }
  if (i >= argc) throw Error::usage("no program given after --");
  const std::vector<std::string> args(argv + i, argv + argc);
  const std::string program_path = resolve(args[0]);
  const dtlaunch::core::EnvMap inherited = dtlaunch::core::EnvMap::from_environ(environ);
  if (!port) port = dtlaunch::launch::find_free_port();
  const std::string tag = dtlaunch::launch::supervisor_tag();
  options.descendant_marker = dtlaunch::contract::supervisor_marker(tag);

  auto make_workers = [&](std::uint32_t restart_count) {
    std::vector<dtlaunch::proc::WorkerProcess> workers;
    for (std::uint32_t local = 0; local < nproc; ++local) {
      dtlaunch::contract::WorkerContract contract;
      contract.rank = node_rank * nproc + local;
      contract.local_rank = local;
      contract.world_size = nnodes * nproc;
      contract.local_world_size = nproc;
      contract.node_rank = node_rank;
      contract.nnodes = nnodes;
      contract.master_addr = addr;
      contract.master_port = *port;
      contract.restart_count = restart_count;
      contract.max_restarts = options.max_restarts;
      contract.supervisor = tag;
      dtlaunch::proc::WorkerProcess w;
      w.rank = contract.rank;
      w.local_rank = local;
      w.program_path = program_path;
      w.argv = args;
      w.env =
          dtlaunch::contract::apply_env(inherited, dtlaunch::contract::to_env(contract, inherited));
      workers.push_back(std::move(w));
    }
    return workers;
  };
  const dtlaunch::proc::RunResult result = dtlaunch::proc::run_workers(make_workers, options);
  std::fprintf(stderr, "proc_driver: exit_status=%d restarts=%u\n", result.exit_status,
               result.restarts);
  return result.exit_status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "proc_driver: %s\n", e.what());
    return e.exit_status();
  }
}
