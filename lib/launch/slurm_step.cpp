#include "launch/slurm_step.hpp"

#include <numeric>
#include <string_view>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/tasks_per_node.hpp"

namespace dtlaunch {

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
  return static_cast<std::uint32_t>(parse_uint_var(found.name, found.value, UINT32_MAX));
}

void note_fallback(SlurmStep& step, const Found& used, std::string_view preferred) {
  if (used.name != preferred)
    step.notes.push_back({Note::Level::kInfo, true,
                          std::string(preferred) + " is not set; using " + std::string(used.name) +
                              "=" + std::string(used.value)});
}

}  // namespace

SlurmContext detect_slurm(const EnvMap& env) {
  if (env.contains("SLURM_STEP_ID") || env.contains("SLURM_STEPID")) return SlurmContext::kStep;
  if (env.contains("SLURM_JOB_ID") || env.contains("SLURM_JOBID") || env.contains("SLURM_PROCID"))
    return SlurmContext::kJobWithoutStep;
  return SlurmContext::kNone;
}

SlurmStep read_slurm_step(const EnvMap& env) {
  switch (detect_slurm(env)) {
    case SlurmContext::kStep:
      break;
    case SlurmContext::kNone:
      throw Error(ExitCode::kBadInput,
                  "--mode slurm, but this is not a Slurm job (no SLURM_JOB_ID, SLURM_STEP_ID or "
                  "SLURM_PROCID in the environment): run it as 'srun dtlaunch PROGRAM' inside a "
                  "job, or use the local mode: 'dtlaunch --nproc-per-node N PROGRAM'");
    case SlurmContext::kJobWithoutStep: {
      // The classic mistake: the batch script runs the launcher itself. With several tasks the
      // others would never start; with one, nothing hangs, but the step's variables (node
      // list, tasks per node, step id for the port) are still the job's, not a step's.
      auto ntasks = env.get("SLURM_NTASKS");
      if (!ntasks) ntasks = env.get("SLURM_NPROCS");
      const std::string tasks = ntasks ? excerpt(*ntasks) : std::string("unset");
      if (ntasks && *ntasks != "1")
        throw Error(
            ExitCode::kBadInput,
            "SLURM_STEP_ID is not set: dtlaunch runs in a Slurm job of SLURM_NTASKS=" + tasks +
                " tasks but outside an srun step (in the batch script itself?), so the "
                "other ranks would never start and rank 0 would wait for them; launch it "
                "as 'srun dtlaunch PROGRAM'");
      throw Error(ExitCode::kBadInput,
                  "SLURM_STEP_ID is not set: dtlaunch runs in a Slurm job (SLURM_NTASKS=" + tasks +
                      ") but outside an srun step (in the batch script itself?); launch it as "
                      "'srun dtlaunch PROGRAM', or for one process on this node without srun "
                      "use the local mode: 'dtlaunch --nproc-per-node 1 PROGRAM'");
    }
  }
  SlurmStep step;
  step.procid = require_u32(env, {"SLURM_PROCID"}, "the global rank of this task");
  step.localid = require_u32(env, {"SLURM_LOCALID"}, "the rank of this task on its node");
  step.nodeid = require_u32(env, {"SLURM_NODEID"}, "the index of this node in the step");

  Found ntasks = require(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"},
                         "the number of tasks in the step");
  step.ntasks = static_cast<std::uint32_t>(parse_uint_var(ntasks.name, ntasks.value, UINT32_MAX));
  note_fallback(step, ntasks, "SLURM_STEP_NUM_TASKS");

  Found nnodes = require(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"},
                         "the number of nodes in the step");
  step.nnodes = static_cast<std::uint32_t>(parse_uint_var(nnodes.name, nnodes.value, UINT32_MAX));
  note_fallback(step, nnodes, "SLURM_STEP_NUM_NODES");

  Found nodelist = require(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"},
                           "the hosts of the step");
  note_fallback(step, nodelist, "SLURM_STEP_NODELIST");
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
    throw Error(ExitCode::kBadInput, std::string(nodelist.name) + ": " + e.what());
  }

  Found tpn = require(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"},
                      "the number of tasks on each node");
  note_fallback(step, tpn, "SLURM_STEP_TASKS_PER_NODE");
  step.tasks_per_node = parse_tasks_per_node(tpn.name, tpn.value);

  Found job = require(env, {"SLURM_JOB_ID", "SLURM_JOBID"}, "the job id");
  step.job_id = parse_uint_var(job.name, job.value);
  Found stepid = require(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, "the step id");
  step.step_id = parse_uint_var(stepid.name, stepid.value);
  if (auto het = env.get("SLURM_HET_JOB_OFFSET"))
    step.het_offset = parse_uint_var("SLURM_HET_JOB_OFFSET", *het);

  step.distribution = std::string(env.get("SLURM_DISTRIBUTION").value_or(""));
  if (auto hostfile = env.get("SLURM_HOSTFILE")) step.hostfile = std::string(*hostfile);
  if (auto cpus = env.get("SLURM_CPUS_PER_TASK")) {
    auto n = parse_uint_var("SLURM_CPUS_PER_TASK", *cpus, 1u << 20);
    if (n == 0) throw Error::bad_env("SLURM_CPUS_PER_TASK", *cpus, "must be at least 1");
    step.cpus_per_task = std::string(*cpus);
  }
  if (auto gpt = env.get("SLURM_GPUS_PER_TASK")) {
    // --gpus-per-task=[type:]N
    std::string_view count = *gpt;
    if (auto colon = count.rfind(':'); colon != std::string_view::npos)
      count = count.substr(colon + 1);
    auto n = parse_uint(count, 1u << 16);
    if (!n)
      throw Error::bad_env("SLURM_GPUS_PER_TASK", *gpt,
                           "expected [TYPE:]N with N a number of GPUs up to 65536");
    step.gpus_per_task = static_cast<std::uint32_t>(*n);
  } else if (auto bind = env.get("SLURMD_TRES_BIND")) {
    // A plain `srun --gpus-per-task=N` exports no SLURM_GPUS_PER_TASK (only an sbatch/salloc
    // allocation does), but slurmd says how it bound the task's GPUs: gpu:per_task:N gives each
    // task its own N GPUs; gpu:single:K binds each task to one GPU (K tasks per GPU).
    std::string_view b = *bind;
    if (b.starts_with("gpu:per_task:")) {
      auto n = parse_uint(b.substr(13), 1u << 16);
      if (!n)
        throw Error::bad_env("SLURMD_TRES_BIND", b,
                             "expected gpu:per_task:N with N a number of GPUs up to 65536");
      step.gpus_per_task = static_cast<std::uint32_t>(*n);
    } else if (b.starts_with("gpu:single:")) {
      step.gpus_per_task = 1;
    }
  }

  // Cross-checks: a wrong world or local size is a rendezvous that waits for ranks that never
  // come, so every disagreement is fatal here, before anything is exported.
  const std::string ntasks_name(ntasks.name), nnodes_name(nnodes.name);
  const std::string tpn_name(tpn.name);
  if (step.ntasks == 0) throw Error::bad_env(ntasks.name, ntasks.value, "a step has no tasks");
  if (step.procid >= step.ntasks)
    throw Error::inconsistent("SLURM_PROCID=" + num(step.procid) + " is not below " + ntasks_name +
                              "=" + num(step.ntasks));
  if (step.tasks_per_node.size() != step.nnodes)
    throw Error::inconsistent(tpn_name + "='" + excerpt(tpn.value) + "' describes " +
                              num(step.tasks_per_node.size()) + " node(s) but " + nnodes_name +
                              "=" + num(step.nnodes));
  std::uint64_t total =
      std::accumulate(step.tasks_per_node.begin(), step.tasks_per_node.end(), std::uint64_t{0});
  if (total != step.ntasks)
    throw Error::inconsistent(tpn_name + "='" + excerpt(tpn.value) + "' adds up to " + num(total) +
                              " tasks but " + ntasks_name + "=" + num(step.ntasks));
  if (step.nodeid >= step.nnodes)
    throw Error::inconsistent("SLURM_NODEID=" + num(step.nodeid) + " is not below " + nnodes_name +
                              "=" + num(step.nnodes));
  if (step.localid >= step.tasks_per_node[step.nodeid])
    throw Error::inconsistent("SLURM_LOCALID=" + num(step.localid) + " but node " +
                              num(step.nodeid) + " runs " + num(step.tasks_per_node[step.nodeid]) +
                              " task(s) per " + tpn_name);
  return step;
}

}  // namespace dtlaunch
