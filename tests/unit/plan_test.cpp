// plan(): which workers a launcher starts, who it is in its log, and how its supervisor is named.
#include "launch/plan.hpp"

#include <functional>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "fake_system.hpp"
#include "launch/render.hpp"
#include "slurm_env.hpp"

using namespace dtlaunch;
using namespace dtlaunch::launch;
using dtlaunch_test::FakeSystem;
using dtlaunch_test::slurm_step_env;

namespace {

LaunchOptions local(std::uint32_t nproc) {
  LaunchOptions o;
  o.argv = {"sh", "-c", "true"};
  o.nproc_per_node = nproc;
  return o;
}

std::optional<std::string> value_of(const PlannedWorker& worker, std::string_view name) {
  for (const contract::EnvChange& change : worker.changes)
    if (change.name == name) return change.value;
  return std::nullopt;
}

}  // namespace

TEST_CASE("plan: under Slurm this task is the one worker, and it speaks as its rank") {
  struct Case {
    int procid, localid, nodeid;
    const char* who;
    bool speaks_for_job;
  };
  for (const Case& c : {Case{0, 0, 0, "rank 0", true}, Case{3, 1, 1, "rank 3", false},
                        Case{5, 1, 2, "rank 5", false}}) {
    INFO(c.who);
    LaunchOptions o;
    o.argv = {"sh"};
    const LaunchPlan p = plan(o, slurm_step_env(c.procid, c.localid, c.nodeid), FakeSystem());
    CHECK(p.mode == Mode::kSlurm);
    REQUIRE(p.workers.size() == 1);
    CHECK(p.workers[0].rank == static_cast<std::uint32_t>(c.procid));
    CHECK(p.workers[0].local_rank == static_cast<std::uint32_t>(c.localid));
    CHECK(p.who == c.who);
    CHECK(p.speaks_for_job == c.speaks_for_job);
    CHECK_FALSE(p.descendant_marker);  // the step's cgroup sweeps, not dtlaunch
    CHECK_FALSE(value_of(p.workers[0], "DTLAUNCH_SUPERVISOR"));
  }
}

TEST_CASE("plan: local mode starts every rank of its node and names them by its tag") {
  LaunchOptions o = local(3);
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "host0";
  o.master_port = 29500;
  const LaunchPlan p = plan(o, core::EnvMap{{"PATH", "/usr/bin:/bin"}}, FakeSystem());
  CHECK(p.mode == Mode::kLocal);
  CHECK(p.who == "node 1");
  CHECK_FALSE(p.speaks_for_job);
  REQUIRE(p.workers.size() == 3);
  REQUIRE(p.descendant_marker);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK(p.workers[i].rank == 3 + i);
    CHECK(p.workers[i].local_rank == i);
    // The guardian looks for exactly what the worker's environment holds.
    CHECK(*p.descendant_marker ==
          "DTLAUNCH_SUPERVISOR=" + *value_of(p.workers[i], "DTLAUNCH_SUPERVISOR"));
  }
}

TEST_CASE("plan: a standalone launch takes its port and tag from the system, so it repeats") {
  FakeSystem sys;
  sys.port = 41234;
  const core::EnvMap env{{"PATH", "/usr/bin:/bin"}};
  const LaunchPlan first = plan(local(2), env, sys);
  const LaunchPlan second = plan(local(2), env, sys);
  CHECK(first.spec.master.port == 41234);
  CHECK(render_json(first.workers, first.spec.argv) ==
        render_json(second.workers, second.spec.argv));
  CHECK(value_of(first.workers[0], "DTLAUNCH_RUN_ID") == "local-" + sys.random_tag());
}

TEST_CASE("plan_workers: a restart tells every worker its count") {
  const core::EnvMap env{{"PATH", "/usr/bin:/bin"}};
  LaunchOptions o = local(2);
  o.max_restarts = 3;
  const LaunchPlan p = plan(o, env, FakeSystem());
  for (std::uint32_t restart : {0u, 2u})
    for (const PlannedWorker& w : plan_workers(p, env, restart, std::string(64, '1')))
      CHECK(value_of(w, "TORCHELASTIC_RESTART_COUNT") == std::to_string(restart));
  CHECK(render_json(plan_workers(p, env, 0, std::string(64, '2')), p.spec.argv) ==
        render_json(p.workers, p.spec.argv));
}

TEST_CASE("plan: local mode inside an srun step reads the step once and starts its node's ranks") {
  core::EnvMap env = slurm_step_env(1, 0, 1);
  env.set("SLURM_STEP_NUM_TASKS", "3");
  env.set("SLURM_STEP_TASKS_PER_NODE", "1(x3)");
  env.set("PATH", "/usr/bin:/bin");
  const LaunchPlan p = plan(local(4), env, FakeSystem());
  CHECK(p.mode == Mode::kLocal);
  REQUIRE(p.inputs.step);  // the nodes and the master come from it
  CHECK(p.inputs.step->procid == 1);
  CHECK(p.who == "node 1");
  REQUIRE(p.workers.size() == 4);
  CHECK(p.workers.front().rank == 4);
  CHECK(p.workers.back().rank == 7);
  CHECK(value_of(p.workers[0], "MASTER_ADDR") == "node1");  // task 0's node
  CHECK(value_of(p.workers[0], "WORLD_SIZE") == "12");
}

TEST_CASE("plan: under Slurm the restart count is the one dtlaunch job exports") {
  LaunchOptions o;
  o.argv = {"sh"};
  core::EnvMap env = slurm_step_env();
  CHECK(value_of(plan(o, env, FakeSystem()).workers.at(0), "TORCHELASTIC_RESTART_COUNT") == "0");
  env.set("DTLAUNCH_RESTART_COUNT", "2");
  CHECK(value_of(plan(o, env, FakeSystem()).workers.at(0), "TORCHELASTIC_RESTART_COUNT") == "2");
  env.set("DTLAUNCH_RESTART_COUNT", "two");
  CHECK_THROWS_WITH(plan(o, env, FakeSystem()),
                    dtlaunch_test::contains_text("DTLAUNCH_RESTART_COUNT"));
}

namespace {

// srun -N1 -n2 on node7: one node's step of a `dtlaunch job --live` job, seen by task `procid`.
core::EnvMap one_node_step(int procid) {
  return core::EnvMap{
      {"SLURM_JOB_ID", "4242"},          {"SLURM_STEP_ID", "5"},
      {"SLURM_PROCID", std::to_string(procid)},
      {"SLURM_LOCALID", std::to_string(procid)},
      {"SLURM_NODEID", "0"},             {"SLURM_STEP_NUM_TASKS", "2"},
      {"SLURM_STEP_NUM_NODES", "1"},     {"SLURM_STEP_NODELIST", "node7"},
      {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_NTASKS", "2"},
      {"PATH", "/usr/bin:/bin"},         {"MASTER_ADDR", "batchhost"},
      {"MASTER_PORT", "29400"}};
}

int status_of(const std::function<void()>& f, std::string* message) {
  try {
    f();
  } catch (const dtlaunch::core::Error& e) {
    *message = e.what();
    return e.exit_status();
  }
  return 0;
}

LaunchOptions job_node(const char* slot) {
  LaunchOptions o;
  o.argv = {"sh"};
  o.job_node = slot;
  return o;
}

}  // namespace

TEST_CASE("plan: --job-node I/N makes a one-node step node I of the job, ranks I*T..") {
  for (int procid = 0; procid < 2; ++procid) {
    const LaunchPlan p = plan(job_node("1/3"), one_node_step(procid), FakeSystem());
    REQUIRE(p.workers.size() == 1);
    CHECK(p.workers[0].rank == static_cast<std::uint32_t>(2 + procid));
    CHECK(p.workers[0].local_rank == static_cast<std::uint32_t>(procid));
    CHECK(p.who == "rank " + std::to_string(2 + procid));
    CHECK_FALSE(p.speaks_for_job);
    CHECK(value_of(p.workers[0], "RANK") == std::to_string(2 + procid));
    CHECK(value_of(p.workers[0], "WORLD_SIZE") == "6");
    CHECK(value_of(p.workers[0], "LOCAL_WORLD_SIZE") == "2");
    CHECK(value_of(p.workers[0], "GROUP_RANK") == "1");
    CHECK(value_of(p.workers[0], "MASTER_ADDR") == "batchhost");
    CHECK(value_of(p.workers[0], "MASTER_PORT") == "29400");
    // Every node's step is one run: the step id does not name it.
    CHECK(value_of(p.workers[0], "DTLAUNCH_RUN_ID") == "slurm-4242.nodes");
  }
  const LaunchPlan first = plan(job_node("0/3"), one_node_step(0), FakeSystem());
  CHECK(first.workers[0].rank == 0);
  CHECK(first.speaks_for_job);
}

TEST_CASE("plan: --job-node refuses a bad slot, a multi-node step, and a step without the store") {
  struct Case {
    const char* slot;
    const char* drop;  // a variable taken out of the step's environment, or ""
    const char* message;
  };
  for (const Case& c : {
           Case{"3", "", "--job-node '3': expected I/N (node I of N, from 0)"},
           Case{"3/3", "", "--job-node '3/3': node 3 is not below the node count 3"},
           Case{"1/x", "", "--job-node='x': expected an integer in 1..1048576"},
           Case{"0/2", "MASTER_ADDR",
                "--job-node needs MASTER_ADDR or --master-addr: the job's store host, the same "
                "for every node's step"},
           Case{"0/2", "MASTER_PORT",
                "--job-node needs MASTER_PORT or --master-port: the job's store port, the same "
                "for every node's step"},
       }) {
    INFO(c.slot << " " << c.drop);
    core::EnvMap env = one_node_step(0);
    if (*c.drop) env.erase(c.drop);
    std::string msg;
    CHECK(status_of([&] { plan(job_node(c.slot), env, FakeSystem()); }, &msg) == 2);
    CHECK(msg == c.message);
  }
  core::EnvMap two_nodes = slurm_step_env();
  two_nodes.set("MASTER_ADDR", "batchhost");
  two_nodes.set("MASTER_PORT", "29400");
  std::string msg;
  CHECK(status_of([&] { plan(job_node("0/3"), two_nodes, FakeSystem()); }, &msg) == 2);
  CHECK(msg == "--job-node: the step spans 3 nodes; each node of the job runs its own step "
               "(srun -N1)");
}
