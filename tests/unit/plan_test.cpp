// plan(): which workers a launcher starts, who it is in its log, and how its supervisor is named.
#include "launch/plan.hpp"

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
