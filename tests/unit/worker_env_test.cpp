#include "launch/worker_env.hpp"

#include <set>

#include "contract/contract.hpp"
#include "dtlaunch_catch.hpp"
#include "fake_system.hpp"
#include "launch/build_spec.hpp"
#include "launch/port.hpp"
#include "launch/render.hpp"
#include "slurm_env.hpp"

using namespace dtlaunch;
using namespace dtlaunch::launch;
using dtlaunch_test::FakeSystem;
using dtlaunch_test::slurm_step_env;

namespace {
LaunchSpec spec_for(const core::EnvMap& env, LaunchOptions o = {}) {
  FakeSystem sys;
  if (o.argv.empty()) o.argv = {"sh", "-c", "echo $RANK"};
  return spec_from_slurm(read_inputs(env, Mode::kSlurm), o, sys);
}
std::map<std::string, std::string> as_map(const contract::EnvDelta& d) {
  std::map<std::string, std::string> m;
  for (const auto& c : d) m[c.name] = c.value.value_or("<unset>");
  return m;
}
}  // namespace

TEST_CASE("worker env: the torchrun contract for a task of an srun step") {
  core::EnvMap env = slurm_step_env(3, 1, 1);
  LaunchSpec spec = spec_for(env);
  contract::EnvDelta delta = build_worker_env(spec, WorkerInfo{3, 1, 0}, env);
  const std::string port = std::to_string(master_port_for(4242, 0, 0));
  const contract::EnvDelta expected = {
      {"RANK", "3"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "6"},
      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "3"},
      {"ROLE_RANK", "3"},
      {"ROLE_WORLD_SIZE", "6"},
      {"ROLE_NAME", "default"},
      {"NODE_RANK", "1"},
      {"NNODES", "3"},
      {"MASTER_ADDR", "node1"},
      {"MASTER_PORT", port},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"DTLAUNCH_RUN_ID", "slurm-4242.0"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"OMP_NUM_THREADS", "1"},
  };
  CHECK(delta == expected);
}

TEST_CASE("worker env: every exported name is in the contract table, in table order") {
  core::EnvMap env = slurm_step_env(1, 1, 0);
  env.set("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b");
  env.set("TORCHELASTIC_USE_AGENT_STORE", "True");
  LaunchOptions o;
  o.gpu_bind = GpuBind::kIsolate;
  o.export_run_id = true;
  LaunchSpec spec = spec_for(env, o);
  CHECK_FALSE(spec.supervisor_tag);  // a Slurm spec: the step's cgroup sweeps, not dtlaunch
  spec.supervisor_tag = "4242-00000000deadbeef";  // what the local mode's shell adds
  spec.affinity.export_device_order = true;       // what --cpu-bind adds
  contract::EnvDelta delta = build_worker_env(spec, WorkerInfo{1, 1, 0, std::string(64, 'c')}, env);

  std::vector<std::string> table;
  for (const contract::ExportedVar& v : contract::exported_vars()) table.emplace_back(v.name);
  std::size_t last = 0;
  for (const contract::EnvChange& c : delta) {
    if (!c.value) continue;
    auto it = std::find(table.begin(), table.end(), c.name);
    INFO(c.name);
    REQUIRE(it != table.end());
    CHECK(static_cast<std::size_t>(it - table.begin()) >= last);
    last = static_cast<std::size_t>(it - table.begin());
  }
  auto m = as_map(delta);
  CHECK(m["CUDA_VISIBLE_DEVICES"] == "GPU-b");
  CHECK(m["DTLAUNCH_CUDA_DEVICE"] == "0");
  CHECK(m["TORCHELASTIC_RUN_ID"] == "4242");
  CHECK(m["TORCHELASTIC_USE_AGENT_STORE"] == "<unset>");
  CHECK(m["DTLAUNCH_SUPERVISOR"] == "4242-00000000deadbeef");
  // Every variable of the table is exported by some configuration (none is dead).
  std::set<std::string> seen;
  for (const auto& c : delta) seen.insert(c.name);
  for (const std::string& name : table) CHECK(seen.count(name) == 1);
}

TEST_CASE("worker env: share mode keeps the visible list and exports the index") {
  core::EnvMap env = slurm_step_env(1, 1, 0);
  env.set("CUDA_VISIBLE_DEVICES", "4,5");
  auto m = as_map(build_worker_env(spec_for(env), WorkerInfo{1, 1, 0}, env));
  CHECK(m["DTLAUNCH_CUDA_DEVICE"] == "1");
  CHECK(m.count("CUDA_VISIBLE_DEVICES") == 0);
  CHECK(contract::apply_env(env, build_worker_env(spec_for(env), WorkerInfo{1, 1, 0}, env))
            .get("CUDA_VISIBLE_DEVICES") == "4,5");
}

TEST_CASE("worker env: the user's settings are kept, a stale device index is removed") {
  core::EnvMap env = slurm_step_env();
  env.set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0");
  env.set("OMP_NUM_THREADS", "7");
  env.set("DTLAUNCH_CUDA_DEVICE", "5");
  core::EnvMap out =
      contract::apply_env(env, build_worker_env(spec_for(env), WorkerInfo{0, 0, 0}, env));
  CHECK(out.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(out.get("OMP_NUM_THREADS") == "7");
  CHECK_FALSE(out.get("DTLAUNCH_CUDA_DEVICE"));
  CHECK(out.get("SLURM_JOB_ID") == "4242");  // everything else passes through
}

TEST_CASE("dry-run rendering: shell lines reproduce the launch, JSON is well-formed") {
  contract::EnvDelta d = {{"RANK", "0"}, {"WEIRD", "it's $HOME"}, {"GONE", std::nullopt}};
  std::string shell = render_shell({{0, 0, d, std::nullopt, {}}}, {"./train", "--lr", "0.1 x"});
  CHECK(shell ==
        "export RANK='0'\n"
        "export WEIRD='it'\\''s $HOME'\n"
        "unset GONE\n"
        "exec './train' '--lr' '0.1 x'\n");
  std::string json = render_json({{0, 0, d, std::nullopt, {}}}, {"./train", "a\"b"});
  CHECK(json ==
        "{\"argv\": [\"./train\", \"a\\\"b\"], \"workers\": [{\"rank\": 0, \"local_rank\": 0, "
        "\"set\": {\"RANK\": \"0\", \"WEIRD\": \"it's $HOME\"}, \"unset\": [\"GONE\"]}]}\n");
}

TEST_CASE("dry-run rendering of a binding: a comment line, and cpus/mems/mem_policy in JSON") {
  affinity::Binding b;
  b.cpus = *affinity::CpuSet::parse("0-3,8-11");
  b.mems = *affinity::CpuSet::parse("0");
  b.policy = affinity::MemPolicy::kPreferred;
  contract::EnvDelta d = {{"RANK", "1"}};
  CHECK(render_shell({{1, 1, d, b, {}}}, {"./train"}) ==
        "# cpus 0-3,8-11 mems preferred:0\n"
        "export RANK='1'\n"
        "exec './train'\n");
  CHECK(render_json({{1, 1, d, b, {}}}, {"./train"}) ==
        "{\"argv\": [\"./train\"], \"workers\": [{\"rank\": 1, \"local_rank\": 1, "
        "\"cpus\": \"0-3,8-11\", \"mems\": \"0\", \"mem_policy\": \"preferred\", "
        "\"set\": {\"RANK\": \"1\"}, \"unset\": []}]}\n");
  b.policy = affinity::MemPolicy::kNone;
  b.mems = affinity::CpuSet();
  CHECK(render_shell({{1, 1, d, b, {}}}, {"./train"}).starts_with("# cpus 0-3,8-11 mems none\n"));
}
