#include "launch/slurm_step.hpp"

#include <numeric>
#include <string_view>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/tasks_per_node.hpp"

namespace dtlaunch::launch {

using core::EnvMap;
using core::Error;
using core::num;

namespace {

struct Found {
  std::string_view name;
  std::string_view value;
};

// The first of `names` that is set, with its name, so that messages quote the variable used.
std::optional<Found> first_of(const EnvMap& env, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names)
    if (auto value = env.get(name)) return Found{name, *value};
  return std::nullopt;
}

Found require(const EnvMap& env, std::initializer_list<std::string_view> names,
              std::string_view why) {
  if (auto found = first_of(env, names)) return *found;
  std::string list;
  for (std::string_view name : names) {
    if (!list.empty()) list += ", ";
    list += name;
  }
  throw Error::missing_env(*names.begin(), names.size() > 1
                                               ? "nor any of " + list + "; " + std::string(why)
                                               : std::string(why));
}

std::uint32_t require_u32(const EnvMap& env, std::initializer_list<std::string_view> names,
                          std::string_view why) {
  Found found = require(env, names, why);
  return static_cast<std::uint32_t>(core::parse_uint_var(found.name, found.value, UINT32_MAX));
}

void note_fallback(SlurmStep& step, const Found& used, std::string_view preferred) {
  if (used.name != preferred)
    step.notes.push_back({Note::Level::kInfo, true,
                          std::string(preferred) + " is not set; using " + std::string(used.name) +
                              "=" + std::string(used.value)});
}

namespace s = contract::setting;

// The classic mistake: the batch script runs the launcher itself. With several tasks the others
// would never start; with one, nothing hangs, but the step's variables (node list, tasks per
// node, step id for the port) are still the job's, not a step's.
[[noreturn]] void refuse_job_without_step(const EnvMap& env) {
  auto ntasks = env.get(s::kSlurmNtasks.name);
  if (!ntasks) ntasks = env.get(s::kSlurmNprocs.name);
  const std::string tasks = std::string(s::kSlurmNtasks.name) + "=" +
                            (ntasks ? core::excerpt(*ntasks) : std::string("unset"));
  const std::string no_step = std::string(s::kSlurmStepId.name) + " is not set: dtlaunch runs in ";
  if (ntasks && *ntasks != "1")
    throw Error(core::ExitCode::kBadInput,
                no_step + "a Slurm job of " + tasks +
                    " tasks but outside an srun step (in the batch script itself?), so the "
                    "other ranks would never start and rank 0 would wait for them; launch it "
                    "as 'srun dtlaunch PROGRAM'");
  throw Error(core::ExitCode::kBadInput,
              no_step + "a Slurm job (" + tasks +
                  ") but outside an srun step (in the batch script itself?); launch it as "
                  "'srun dtlaunch PROGRAM', or for one process on this node without srun "
                  "use the local mode: 'dtlaunch --nproc-per-node 1 PROGRAM'");
}

void require_step(const EnvMap& env) {
  switch (detect_slurm(env)) {
    case SlurmContext::kStep:
      return;
    case SlurmContext::kNone:
      throw Error(core::ExitCode::kBadInput,
                  "--mode slurm, but this is not a Slurm job (no " +
                      std::string(s::kSlurmJobId.name) + ", " + std::string(s::kSlurmStepId.name) +
                      " or " + std::string(s::kSlurmProcId.name) +
                      " in the environment): run it as 'srun dtlaunch PROGRAM' inside a job, or "
                      "use the local mode: 'dtlaunch --nproc-per-node N PROGRAM'");
    case SlurmContext::kJobWithoutStep:
      refuse_job_without_step(env);
  }
}

// The variables the sizes came from, so that the cross-checks quote the one used.
struct SizeSources {
  Found ntasks, nnodes;
};

// A count of the step from the first of `names` that is set (the first is the step's own, the
// others older or job-wide ones: using one is noted).
Found require_count(const EnvMap& env, std::initializer_list<std::string_view> names,
                    std::string_view why, SlurmStep& step, std::uint32_t& count) {
  const Found found = require(env, names, why);
  count = static_cast<std::uint32_t>(core::parse_uint_var(found.name, found.value, UINT32_MAX));
  note_fallback(step, found, *names.begin());
  return found;
}

// RANK, LOCAL_RANK, NODE_RANK, WORLD_SIZE and NNODES.
SizeSources read_sizes(const EnvMap& env, SlurmStep& step) {
  step.procid = require_u32(env, {s::kSlurmProcId.name}, "the global rank of this task");
  step.localid = require_u32(env, {s::kSlurmLocalId.name}, "the rank of this task on its node");
  step.nodeid = require_u32(env, {s::kSlurmNodeId.name}, "the index of this node in the step");

  const Found ntasks =
      require_count(env, {s::kSlurmStepNumTasks.name, s::kSlurmNtasks.name, s::kSlurmNprocs.name},
                    "the number of tasks in the step", step, step.ntasks);
  const Found nnodes = require_count(
      env, {s::kSlurmStepNumNodes.name, s::kSlurmJobNumNodes.name, s::kSlurmNnodes.name},
      "the number of nodes in the step", step, step.nnodes);
  return {ntasks, nnodes};
}

void read_hosts(const EnvMap& env, SlurmStep& step, const Found& nnodes) {
  Found nodelist =
      require(env, {s::kSlurmStepNodelist.name, s::kSlurmJobNodelist.name, s::kSlurmNodelist.name},
              "the hosts of the step");
  note_fallback(step, nodelist, s::kSlurmStepNodelist.name);
  try {
    // Counted before it is expanded: a node list of billions of hosts is an error, not an
    // allocation of billions of strings.
    const std::uint64_t hosts = hostlist::count(nodelist.value);
    if (hosts != step.nnodes)
      throw Error::inconsistent(std::string(nodelist.name) + " has " + num(hosts) +
                                " host(s) but " + std::string(nnodes.name) + "=" +
                                num(step.nnodes));
    step.hosts = hostlist::expand(nodelist.value);
  } catch (const hostlist::ParseError& e) {
    throw Error(core::ExitCode::kBadInput, std::string(nodelist.name) + ": " + e.what());
  }
}

Found read_tasks_per_node(const EnvMap& env, SlurmStep& step) {
  Found tpn = require(env, {s::kSlurmStepTasksPerNode.name, s::kSlurmTasksPerNode.name},
                      "the number of tasks on each node");
  note_fallback(step, tpn, s::kSlurmStepTasksPerNode.name);
  step.tasks_per_node = parse_tasks_per_node(tpn.name, tpn.value);
  return tpn;
}

void read_ids(const EnvMap& env, SlurmStep& step) {
  Found job = require(env, {s::kSlurmJobId.name, s::kSlurmJobIdOld.name}, "the job id");
  step.job_id = core::parse_uint_var(job.name, job.value);
  Found stepid = require(env, {s::kSlurmStepId.name, s::kSlurmStepIdOld.name}, "the step id");
  step.step_id = core::parse_uint_var(stepid.name, stepid.value);
  if (auto het = env.get(s::kSlurmHetJobOffset.name))
    step.het_offset = core::parse_uint_var(s::kSlurmHetJobOffset.name, *het);
}

void read_gpus_per_task(const EnvMap& env, SlurmStep& step) {
  if (auto gpt = env.get(s::kSlurmGpusPerTask.name)) {
    // --gpus-per-task=[type:]N
    std::string_view count = *gpt;
    if (auto colon = count.rfind(':'); colon != std::string_view::npos)
      count = count.substr(colon + 1);
    auto n = core::parse_uint(count, 1u << 16);
    if (!n)
      throw Error::bad_env(s::kSlurmGpusPerTask.name, *gpt,
                           "expected [TYPE:]N with N a number of GPUs up to 65536");
    step.gpus_per_task = static_cast<std::uint32_t>(*n);
  } else if (auto bind = env.get(s::kSlurmdTresBind.name)) {
    // A plain `srun --gpus-per-task=N` exports no SLURM_GPUS_PER_TASK (only an sbatch/salloc
    // allocation does), but slurmd says how it bound the task's GPUs: gpu:per_task:N gives each
    // task its own N GPUs; gpu:single:K binds each task to one GPU (K tasks per GPU).
    std::string_view b = *bind;
    if (b.starts_with("gpu:per_task:")) {
      auto n = core::parse_uint(b.substr(13), 1u << 16);
      if (!n)
        throw Error::bad_env(s::kSlurmdTresBind.name, b,
                             "expected gpu:per_task:N with N a number of GPUs up to 65536");
      step.gpus_per_task = static_cast<std::uint32_t>(*n);
    } else if (b.starts_with("gpu:single:")) {
      step.gpus_per_task = 1;
    }
  }
}

void read_placement(const EnvMap& env, SlurmStep& step) {
  step.distribution = contract::read_text(env, s::kSlurmDistribution).value_or("");
  step.hostfile = contract::read_text(env, s::kSlurmHostfile);
  if (auto cpus = env.get(s::kSlurmCpusPerTask.name)) {
    auto n = core::parse_uint_var(s::kSlurmCpusPerTask.name, *cpus, 1u << 20);
    if (n == 0) throw Error::bad_env(s::kSlurmCpusPerTask.name, *cpus, "must be at least 1");
    step.cpus_per_task = std::string(*cpus);
  }
  read_gpus_per_task(env, step);
}

// A wrong world or local size is a rendezvous that waits for ranks that never come, so every
// disagreement is fatal here, before anything is exported.
void cross_check(const SlurmStep& step, const SizeSources& from, const Found& tpn) {
  const std::string ntasks_name(from.ntasks.name), nnodes_name(from.nnodes.name);
  const std::string tpn_name(tpn.name), tpn_value = core::excerpt(tpn.value);
  if (step.ntasks == 0)
    throw Error::bad_env(from.ntasks.name, from.ntasks.value, "a step has no tasks");
  if (step.procid >= step.ntasks)
    throw Error::inconsistent(std::string(s::kSlurmProcId.name) + "=" + num(step.procid) +
                              " is not below " + ntasks_name + "=" + num(step.ntasks));
  if (step.tasks_per_node.size() != step.nnodes)
    throw Error::inconsistent(tpn_name + "='" + tpn_value + "' describes " +
                              num(step.tasks_per_node.size()) + " node(s) but " + nnodes_name +
                              "=" + num(step.nnodes));
  std::uint64_t total =
      std::accumulate(step.tasks_per_node.begin(), step.tasks_per_node.end(), std::uint64_t{0});
  if (total != step.ntasks)
    throw Error::inconsistent(tpn_name + "='" + tpn_value + "' adds up to " + num(total) +
                              " tasks but " + ntasks_name + "=" + num(step.ntasks));
  if (step.nodeid >= step.nnodes)
    throw Error::inconsistent(std::string(s::kSlurmNodeId.name) + "=" + num(step.nodeid) +
                              " is not below " + nnodes_name + "=" + num(step.nnodes));
  if (step.localid >= step.tasks_per_node[step.nodeid])
    throw Error::inconsistent(std::string(s::kSlurmLocalId.name) + "=" + num(step.localid) +
                              " but node " + num(step.nodeid) + " runs " +
                              num(step.tasks_per_node[step.nodeid]) + " task(s) per " + tpn_name);
}

}  // namespace

SlurmContext detect_slurm(const EnvMap& env) {
  if (env.contains(s::kSlurmStepId.name) || env.contains(s::kSlurmStepIdOld.name))
    return SlurmContext::kStep;
  if (env.contains(s::kSlurmJobId.name) || env.contains(s::kSlurmJobIdOld.name) ||
      env.contains(s::kSlurmProcId.name))
    return SlurmContext::kJobWithoutStep;
  return SlurmContext::kNone;
}

SlurmStep read_slurm_step(const EnvMap& env) {
  require_step(env);
  SlurmStep step;
  const SizeSources sizes = read_sizes(env, step);
  read_hosts(env, step, sizes.nnodes);
  const Found tpn = read_tasks_per_node(env, step);
  read_ids(env, step);
  read_placement(env, step);
  cross_check(step, sizes, tpn);
  return step;
}

}  // namespace dtlaunch::launch
