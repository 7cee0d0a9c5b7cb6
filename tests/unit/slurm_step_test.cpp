#include "launch/slurm_step.hpp"

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "slurm_env.hpp"

using namespace dtlaunch;
using namespace dtlaunch::launch;
using dtlaunch::core::EnvMap;
using dtlaunch_test::slurm_step_env;

namespace {
std::string error_of(const EnvMap& env) {
  try {
    read_slurm_step(env);
  } catch (const core::Error& e) {
    CHECK(e.exit_status() == 2);
    std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  FAIL("read_slurm_step accepted the environment");
  return {};
}
}  // namespace

TEST_CASE("slurm step: a well-formed step is read") {
  SlurmStep step = read_slurm_step(slurm_step_env(3, 1, 1));
  CHECK(step.procid == 3);
  CHECK(step.localid == 1);
  CHECK(step.nodeid == 1);
  CHECK(step.ntasks == 6);
  CHECK(step.nnodes == 3);
  CHECK(step.hosts == std::vector<std::string>{"node1", "node2", "node3"});
  CHECK(step.tasks_per_node == std::vector<std::uint32_t>{2, 2, 2});
  CHECK(step.job_id == 4242);
  CHECK(step.step_id == 0);
  CHECK(step.notes.empty());
}

TEST_CASE("slurm step: the step's size wins over the job's") {
  // In a batch script SLURM_NTASKS describes the allocation (say 8) while a step may use 6.
  EnvMap env = slurm_step_env();
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_NPROCS", "8");
  CHECK(read_slurm_step(env).ntasks == 6);
}

TEST_CASE("slurm step: job-level fallbacks for incomplete step variables, with a note") {
  EnvMap env = slurm_step_env();
  env.erase("SLURM_STEP_NUM_TASKS");
  env.erase("SLURM_STEP_NODELIST");
  env.set("SLURM_JOB_NODELIST", "node[1-3]");
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env.set("SLURM_TASKS_PER_NODE", "2(x3)");
  SlurmStep step = read_slurm_step(env);
  CHECK(step.ntasks == 6);
  CHECK(step.hosts.size() == 3);
  CHECK(step.notes.size() == 3);
  CHECK(step.notes[0].text == "SLURM_STEP_NUM_TASKS is not set; using SLURM_NTASKS=6");
}

TEST_CASE("slurm step: a batch script without srun is refused, saying what to do") {
  // What a real sbatch sets in the batch script: rank 0 of the job, the job's task count, and
  // no step variable at all.
  EnvMap env{{"SLURM_JOB_ID", "17"},
             {"SLURM_PROCID", "0"},
             {"SLURM_LOCALID", "0"},
             {"SLURM_NODEID", "0"},
             {"SLURM_NTASKS", "4"},
             {"SLURM_JOB_NODELIST", "node[1-2]"},
             {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  std::string msg = error_of(env);
  CHECK(msg.find("SLURM_STEP_ID is not set") == 0);
  CHECK(msg.find("SLURM_NTASKS=4") != std::string::npos);
  CHECK(msg.find("srun dtlaunch") != std::string::npos);
  CHECK(detect_slurm(env) == SlurmContext::kJobWithoutStep);
  CHECK(detect_slurm(EnvMap{}) == SlurmContext::kNone);
  CHECK(detect_slurm(slurm_step_env()) == SlurmContext::kStep);
}

TEST_CASE("slurm step: every inconsistency names the variables and values") {
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> set;
    std::vector<std::string> unset;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"rank past world",
       {{"SLURM_PROCID", "6"}},
       {},
       "inconsistent Slurm environment: SLURM_PROCID=6 is not below SLURM_STEP_NUM_TASKS=6"},
      {"hosts vs nodes",
       {{"SLURM_STEP_NODELIST", "node[1-2]"}},
       {},
       "inconsistent Slurm environment: SLURM_STEP_NODELIST has 2 host(s) but "
       "SLURM_STEP_NUM_NODES=3"},
      {"tasks-per-node entries vs nodes",
       {{"SLURM_STEP_TASKS_PER_NODE", "3(x2)"}},
       {},
       "inconsistent Slurm environment: SLURM_STEP_TASKS_PER_NODE='3(x2)' describes 2 node(s) "
       "but SLURM_STEP_NUM_NODES=3"},
      {"tasks-per-node sum vs world",
       {{"SLURM_STEP_TASKS_PER_NODE", "2,2,3"}},
       {},
       "inconsistent Slurm environment: SLURM_STEP_TASKS_PER_NODE='2,2,3' adds up to 7 tasks "
       "but SLURM_STEP_NUM_TASKS=6"},
      {"node id past nodes",
       {{"SLURM_NODEID", "3"}},
       {},
       "inconsistent Slurm environment: SLURM_NODEID=3 is not below SLURM_STEP_NUM_NODES=3"},
      {"local id past tasks on node",
       {{"SLURM_LOCALID", "2"}},
       {},
       "inconsistent Slurm environment: SLURM_LOCALID=2 but node 0 runs 2 task(s) per "
       "SLURM_STEP_TASKS_PER_NODE"},
      {"zero tasks",
       {{"SLURM_STEP_NUM_TASKS", "0"}},
       {},
       "SLURM_STEP_NUM_TASKS='0': a step has no tasks"},
      {"missing rank",
       {},
       {"SLURM_PROCID"},
       "SLURM_PROCID is not set: the global rank of this task"},
      {"missing local id",
       {},
       {"SLURM_LOCALID"},
       "SLURM_LOCALID is not set: the rank of this task on its node"},
      {"missing node list",
       {},
       {"SLURM_STEP_NODELIST"},
       "SLURM_STEP_NODELIST is not set: nor any of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, "
       "SLURM_NODELIST; the hosts of the step"},
      {"unparsable rank",
       {{"SLURM_PROCID", "1x"}},
       {},
       "SLURM_PROCID='1x': expected a non-negative integer no larger than 4294967295"},
      {"negative rank",
       {{"SLURM_PROCID", "-1"}},
       {},
       "SLURM_PROCID='-1': expected a non-negative integer no larger than 4294967295"},
      {"bad tasks-per-node",
       {{"SLURM_STEP_TASKS_PER_NODE", "2(x3"}},
       {},
       "SLURM_STEP_TASKS_PER_NODE='2(x3': expected N(xM) in item '2(x3'"},
      {"bad cpus per task",
       {{"SLURM_CPUS_PER_TASK", "0"}},
       {},
       "SLURM_CPUS_PER_TASK='0': must be at least 1"},
      {"bad job id",
       {{"SLURM_JOB_ID", "abc"}},
       {},
       "SLURM_JOB_ID='abc': expected a non-negative integer"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    EnvMap env = slurm_step_env();
    for (const auto& [k, v] : c.set) env.set(k, v);
    for (const auto& k : c.unset) env.erase(k);
    CHECK(error_of(env) == c.message);
  }
}

TEST_CASE("slurm step: an invalid node list is an error that names the variable") {
  EnvMap env = slurm_step_env();
  env.set("SLURM_STEP_NODELIST", "node[3-1]");
  std::string msg = error_of(env);
  CHECK(msg.rfind("SLURM_STEP_NODELIST: ", 0) == 0);
}

TEST_CASE("slurm step: uneven layouts are read per node") {
  EnvMap env = slurm_step_env(2, 0, 1);
  env.set("SLURM_STEP_NUM_TASKS", "3");
  env.set("SLURM_STEP_NUM_NODES", "2");
  env.set("SLURM_STEP_NODELIST", "node[1-2]");
  env.set("SLURM_STEP_TASKS_PER_NODE", "2,1");
  SlurmStep step = read_slurm_step(env);
  CHECK(step.tasks_per_node == std::vector<std::uint32_t>{2, 1});
}
