#include "job.hpp"

#include <algorithm>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/host.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/tasks_per_node.hpp"

namespace dtlaunch::job {

using core::Error;

namespace {

namespace s = contract::setting;

std::string required(const core::EnvMap& env, const contract::Setting& setting) {
  const auto value = contract::read_text(env, setting);
  if (!value)
    throw Error::missing_env(setting.name,
                             "dtlaunch job runs in a batch script (sbatch or salloc), "
                             "once, and starts the step itself");
  return *value;
}

}  // namespace

Allocation read_allocation(const core::EnvMap& env) {
  Allocation a;
  a.job_id = required(env, s::kSlurmJobId);
  const auto step = contract::read_text(env, s::kSlurmStepId);
  if (step && step != "4294967294" && step != "batch")
    throw Error::usage("dtlaunch job runs once in the batch script, not inside an srun step (" +
                       contract::quoted_value(s::kSlurmStepId, *step) +
                       "): it starts the step itself");
  auto list = contract::read_text(env, s::kSlurmJobNodelist);
  if (!list) list = contract::read_text(env, s::kSlurmNodelist);
  if (!list) required(env, s::kSlurmJobNodelist);
  try {
    a.nodes = hostlist::expand(*list);
  } catch (const Error& e) {
    throw Error::bad_env(s::kSlurmJobNodelist.name, *list, e.what());
  }
  if (a.nodes.empty()) throw Error::bad_env(s::kSlurmJobNodelist.name, *list, "no node");
  if (const auto per_node = contract::read_text(env, s::kSlurmNtasksPerNode)) {
    a.tasks_per_node = static_cast<std::uint32_t>(
        core::parse_count(s::kSlurmNtasksPerNode.name, *per_node, 1, 65536));
  } else if (const auto tasks = contract::read_text(env, s::kSlurmTasksPerNode)) {
    const auto counts = launch::parse_tasks_per_node(s::kSlurmTasksPerNode.name, *tasks);
    // A heterogeneous allocation would change the world size when a spare replaces a node: the
    // smallest share fits on every node.
    a.tasks_per_node = *std::min_element(counts.begin(), counts.end());
  }
  a.batch_host = contract::read_text(env, s::kSlurmdNodename).value_or(core::short_host_name(""));
  a.gpus_per_node = contract::read_text(env, s::kSlurmGpusPerNode);
  if (const auto cpus = contract::read_text(env, s::kSlurmCpusPerTask)) {
    core::parse_count(s::kSlurmCpusPerTask.name, *cpus, 1, 1 << 20);
    a.cpus_per_task = *cpus;
  }
  return a;
}

std::set<int> parse_exit_statuses(std::string_view flag, std::string_view text) {
  std::set<int> statuses;
  for (std::string_view rest = text;;) {
    const auto comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    const auto dash = part.find('-');
    const auto first = core::parse_uint(part.substr(0, dash), 255);
    const auto last =
        dash == std::string_view::npos ? first : core::parse_uint(part.substr(dash + 1), 255);
    if (!first || !last || *first < 1 || *last < *first)
      throw Error::bad_env(flag, text,
                           "'" + core::excerpt(part, 40, core::Quote::kNone) +
                               "' is not an exit status or a range of them: expected statuses in "
                               "1..255, comma-separated, ranges as 10-12");
    for (auto status = *first; status <= *last; ++status) statuses.insert(static_cast<int>(status));
    if (comma == std::string_view::npos) return statuses;
    rest.remove_prefix(comma + 1);
  }
}

Sizes decide_sizes(const Allocation& allocation, const JobOptions& options) {
  const auto total = static_cast<std::uint32_t>(allocation.nodes.size());
  Sizes s;
  if (options.nodes && options.spare_nodes && *options.nodes + *options.spare_nodes > total)
    throw Error::usage("--nodes " + std::to_string(*options.nodes) + " + --spare-nodes " +
                       std::to_string(*options.spare_nodes) + " exceed the allocation's " +
                       std::to_string(total) + " node(s)");
  if (options.nodes) {
    s.nodes = *options.nodes;
    s.spares = options.spare_nodes.value_or(total >= s.nodes ? total - s.nodes : 0);
  } else {
    s.spares = options.spare_nodes.value_or(0);
    if (s.spares >= total)
      throw Error::usage("--spare-nodes " + std::to_string(s.spares) + " leaves no node of the " +
                         std::to_string(total) + " allocated to run on");
    s.nodes = total - s.spares;
  }
  if (s.nodes == 0) throw Error::usage("--nodes must be at least 1");
  if (s.nodes > total)
    throw Error::usage("--nodes " + std::to_string(s.nodes) + ": the allocation has only " +
                       std::to_string(total) + " node(s)");
  s.min_nodes = options.min_nodes.value_or(s.nodes);
  if (s.min_nodes == 0 || s.min_nodes > s.nodes)
    throw Error::usage("--min-nodes " + std::to_string(s.min_nodes) + ": expected 1.." +
                       std::to_string(s.nodes) + " (--nodes)");
  s.tasks_per_node = options.tasks_per_node.value_or(allocation.tasks_per_node);
  return s;
}

std::string out_of_nodes(std::size_t left, const std::set<std::string>& excluded,
                         const Sizes& sizes, const JobOptions& options) {
  std::string line =
      "stopped: " + std::to_string(left) + " healthy node(s) left (" +
      hostlist::compress(std::vector<std::string>(excluded.begin(), excluded.end())) +
      " excluded), " + std::to_string(sizes.min_nodes) + " needed; the spares are used up";
  // Not when --min-nodes was given (the user chose), nor when one node is already enough.
  if (!options.min_nodes && sizes.min_nodes > 1)
    line += " (--min-nodes lets a program that can change its world size go on with fewer)";
  return line;
}

std::vector<std::string> choose_nodes(const std::vector<std::string>& allocation,
                                      const std::set<std::string>& excluded, std::uint32_t want) {
  std::vector<std::string> chosen;
  for (const auto& node : allocation) {
    if (chosen.size() == want) break;
    if (!excluded.count(node)) chosen.push_back(node);
  }
  return chosen;
}

namespace {

// The options that shape a step's tasks, the same for every step of an attempt.
void add_task_shape(std::vector<std::string>& argv, const Allocation& allocation,
                    const JobOptions& options) {
  if (allocation.gpus_per_node) argv.push_back("--gpus-per-node=" + *allocation.gpus_per_node);
  if (allocation.cpus_per_task) argv.push_back("--cpus-per-task=" + *allocation.cpus_per_task);
  // Each task's lines labelled, srun's own not: only srun's own say how a task ended
  // (srun_output.hpp); the driver takes the labels off again unless the user asked for them.
  if (!srun_labels_asked(options.srun_args)) argv.push_back("--label");
  argv.insert(argv.end(), options.srun_args.begin(), options.srun_args.end());
}

}  // namespace

std::vector<std::string> srun_command(const std::string& dtlaunch,
                                      const std::vector<std::string>& nodes, const Sizes& sizes,
                                      const Allocation& allocation, const JobOptions& options,
                                      std::uint32_t restart) {
  const auto n = static_cast<std::uint32_t>(nodes.size());
  std::vector<std::string> argv = {
      "srun",
      "--nodes=" + std::to_string(n),
      "--nodelist=" + hostlist::compress(nodes),
      // Explicit, so that the batch job's SLURM_NTASKS (sized for the whole allocation) does not
      // ask for more tasks than the chosen nodes hold.
      "--ntasks=" + std::to_string(n * sizes.tasks_per_node),
      "--ntasks-per-node=" + std::to_string(sizes.tasks_per_node),
      // The first task to fail ends the step, frozen tasks included: the driver learns at once.
      "--kill-on-bad-exit=1",
  };
  // The last attempt's step may live on in slurmctld, holding the job's CPUs and GPUs on the
  // victims, until its lost node answers: a cut-off node when slurmctld next retries (60 s
  // after it comes back), a node whose slurmd died never. Its tasks are gone; a restart without
  // --overlap would wait for "Requested nodes are busy" all that time.
  if (restart > 0) argv.push_back("--overlap");
  add_task_shape(argv, allocation, options);
  argv.push_back(dtlaunch);
  argv.push_back("--preflight");
  if (options.watch) argv.push_back("--watch");
  argv.insert(argv.end(), options.launch_args.begin(), options.launch_args.end());
  argv.push_back("--");
  argv.insert(argv.end(), options.program.begin(), options.program.end());
  return argv;
}

std::vector<std::string> node_step_command(const std::string& dtlaunch, const std::string& node,
                                           std::uint32_t slot, std::uint32_t slots,
                                           const Sizes& sizes, const Allocation& allocation,
                                           const JobOptions& options, bool replacement) {
  const std::string tasks = std::to_string(sizes.tasks_per_node);
  std::vector<std::string> argv = {
      "srun", "--nodes=1", "--nodelist=" + node, "--ntasks=" + tasks, "--ntasks-per-node=" + tasks,
      // A rank that fails ends its node's step: the node's ranks are replaced together.
      "--kill-on-bad-exit=1"};
  if (replacement) argv.push_back("--overlap");
  add_task_shape(argv, allocation, options);
  argv.push_back(dtlaunch);
  argv.push_back("--job-node=" + std::to_string(slot) + "/" + std::to_string(slots));
  argv.insert(argv.end(), options.launch_args.begin(), options.launch_args.end());
  argv.push_back("--");
  argv.insert(argv.end(), options.program.begin(), options.program.end());
  return argv;
}

std::optional<std::string> choose_spare(const std::vector<std::string>& allocation,
                                        const std::set<std::string>& excluded,
                                        const std::set<std::string>& in_use,
                                        const std::vector<std::string>& returned) {
  const auto back = [&returned](const std::string& node) {
    return std::find(returned.begin(), returned.end(), node) != returned.end();
  };
  for (const auto& node : allocation)
    if (!excluded.count(node) && !in_use.count(node) && !back(node)) return node;
  for (const auto& node : returned)
    if (!excluded.count(node) && !in_use.count(node)) return node;
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> live_environment(const std::string& store_host,
                                                                  std::uint16_t store_port) {
  return {{std::string(s::kMasterAddr.name), store_host},
          {std::string(s::kMasterPort.name), std::to_string(store_port)},
          {std::string(s::kStoreHosted.name), "1"},
          {std::string(s::kLive.name), "1"}};
}

std::string ranks_of_tasks(std::string_view tasks, std::uint32_t first) {
  std::string out;
  std::string number;
  for (std::size_t i = 0; i <= tasks.size(); ++i) {
    const char c = i < tasks.size() ? tasks[i] : ',';
    if (c >= '0' && c <= '9') {
      number += c;
      continue;
    }
    if (!number.empty())
      out += std::to_string(first + static_cast<std::uint32_t>(std::stoul(number)));
    number.clear();
    if (i < tasks.size()) out += c;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> attempt_environment(std::uint32_t restart,
                                                                     const std::string& job_key) {
  const std::string count = std::to_string(restart);
  return {{std::string(contract::setting::kRestartCount.name), count},
          {std::string(contract::env_var::kRestartCount), count},
          {std::string(contract::env_var::kJobKey), job_key}};
}

bool srun_labels_asked(const std::vector<std::string>& srun_args) {
  return std::any_of(srun_args.begin(), srun_args.end(),
                     [](const std::string& a) { return a == "-l" || a == "--label"; });
}

}  // namespace dtlaunch::job
