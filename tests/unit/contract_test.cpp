// The launcher's writer against the runtime's reader: every worker of a table of Slurm and local
// layouts reads back exactly the contract the launcher meant to give it.
#include "contract/contract.hpp"

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "fake_system.hpp"
#include "launch/build_spec.hpp"
#include "launch/worker_env.hpp"
#include "slurm_env.hpp"

using namespace dtlaunch;
using namespace dtlaunch::contract;
using dtlaunch::core::EnvMap;
using dtlaunch_test::FakeSystem;
using dtlaunch_test::slurm_step_env;

namespace {

struct Layout {
  const char* what;
  EnvMap env;
  launch::LaunchOptions options;
  bool local = false;
  std::uint32_t restart_count = 0;
};

EnvMap with(EnvMap env, std::initializer_list<std::pair<std::string, std::string>> vars) {
  for (const auto& [name, value] : vars) env.set(name, value);
  return env;
}

launch::LaunchOptions options(std::function<void(launch::LaunchOptions&)> change = {}) {
  launch::LaunchOptions o;
  o.argv = {"sh", "-c", "true"};
  if (change) change(o);
  return o;
}

// The workers this launcher would start: its own task under Slurm, every local rank locally.
std::vector<WorkerContract> contracts_of(const Layout& layout) {
  FakeSystem sys;
  sys.gpu_files = 0;
  std::vector<WorkerContract> out;
  if (!layout.local) {
    const launch::LaunchInputs in = launch::read_inputs(layout.env, launch::Mode::kSlurm);
    const launch::SlurmStep& step = *in.step;
    const launch::LaunchSpec spec = launch::spec_from_slurm(in, layout.options, sys);
    out.push_back(launch::worker_contract(spec, {step.procid, step.localid, layout.restart_count}));
    return out;
  }
  sys.port = 40001;
  launch::LaunchSpec spec = launch::spec_from_local(
      launch::read_inputs(layout.env, launch::Mode::kLocal), layout.options, sys);
  spec.supervisor_tag = "1234-00112233445566778899";
  for (std::uint32_t local = 0; local < spec.local_world_size; ++local)
    out.push_back(launch::worker_contract(
        spec, {spec.first_rank_on_node + local, local, layout.restart_count}));
  return out;
}

}  // namespace

TEST_CASE("contract: parse(apply(to_env(w))) == w for Slurm and local layouts") {
  const EnvMap base = slurm_step_env(3, 1, 1);
  const EnvMap stale = with(base, {{"DTLAUNCH_RUN_ID", "outer"}, {"DTLAUNCH_CUDA_DEVICE", "5"}});
  const EnvMap gpus = with(base, {{"CUDA_VISIBLE_DEVICES", "2,3"}});
  const EnvMap local = {{"PATH", "/usr/bin:/bin"}};
  const std::vector<Layout> layouts = {
      {"srun -N3 -n6, rank 3", base, options()},
      {"srun rank 0", slurm_step_env(0, 0, 0), options()},
      {"srun rank 5", slurm_step_env(5, 1, 2), options()},
      {"run id exported", base, options([](launch::LaunchOptions& o) { o.export_run_id = true; })},
      {"heterogeneous job", with(base, {{"SLURM_HET_JOB_OFFSET", "1"}}), options()},
      {"cpus per task", with(base, {{"SLURM_CPUS_PER_TASK", "7"}}), options()},
      {"an outer launch's run id and device are removed", stale, options()},
      {"two GPUs, isolated", gpus,
       options([](launch::LaunchOptions& o) { o.gpu_bind = launch::GpuBind::kIsolate; })},
      {"given master", base, options([](launch::LaunchOptions& o) {
         o.master_addr = "10.0.0.9";
         o.master_port = 29500;
       })},
      {"local standalone, 4 workers", local,
       options([](launch::LaunchOptions& o) { o.nproc_per_node = 4; }), true},
      {"local, restarted twice of 3", local, options([](launch::LaunchOptions& o) {
         o.nproc_per_node = 2;
         o.max_restarts = 3;
       }),
       true, 2},
      {"local node 1 of 2 with a run id", local, options([](launch::LaunchOptions& o) {
         o.nproc_per_node = 3;
         o.nnodes = 2;
         o.node_rank = 1;
         o.master_addr = "host0";
         o.master_port = 29500;
         o.run_id = "exp7";
       }),
       true},
  };
  for (const Layout& layout : layouts) {
    INFO(layout.what);
    const std::vector<WorkerContract> workers = contracts_of(layout);
    REQUIRE_FALSE(workers.empty());
    for (const WorkerContract& w : workers) {
      INFO("rank " << w.rank);
      const WorkerContract read = parse_contract(apply_env(layout.env, to_env(w, layout.env)));
      CHECK(read == w);
    }
  }
}

TEST_CASE("contract: what the launcher leaves to the inherited environment reads back as it") {
  WorkerContract w;
  w.master_addr = "h";
  w.master_port = 1;
  w.omp_num_threads = "4";
  w.pci_device_order = true;
  const EnvMap inherited = {{"OMP_NUM_THREADS", "2"},
                            {"CUDA_DEVICE_ORDER", "FASTEST_FIRST"},
                            {"CUDA_VISIBLE_DEVICES", ""}};
  const WorkerContract read = parse_contract(apply_env(inherited, to_env(w, inherited)));
  CHECK(read.omp_num_threads == "2");
  CHECK_FALSE(read.pci_device_order);
  CHECK(read.visible_devices == "");  // set but empty: CUDA then sees no device
}

TEST_CASE("contract: to_env writes the variables of the table, in its order") {
  WorkerContract w;
  w.master_addr = "h";
  w.master_port = 1;
  w.dtlaunch_run_id = "r";
  w.torchelastic_run_id = "j";
  w.device = 0;
  w.visible_devices = "GPU-1";
  w.supervisor = "s";
  w.omp_num_threads = "1";
  w.pci_device_order = true;
  w.job_key = std::string(64, 'a');
  const EnvDelta delta = to_env(w, EnvMap{{"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  std::vector<std::string> names;
  for (const EnvChange& change : delta) names.push_back(change.name);
  std::vector<std::string> table;
  for (const ExportedVar& var : exported_vars()) table.emplace_back(var.name);
  for (const RemovedVar& var : removed_vars()) table.emplace_back(var.name);
  CHECK(names == table);
  CHECK(supervisor_marker("s") == "DTLAUNCH_SUPERVISOR=s");
}

TEST_CASE("contract: parse names every problem in one line") {
  const EnvMap good = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "9"}};
  struct Case {
    EnvMap env;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {with(good, {{"NODE_RANK", "2"}, {"NNODES", "2"}}), {"NODE_RANK=2 is not below NNODES=2"}},
      {with(good, {{"NNODES", "0"}}), {"NNODES='0' must be at least 1"}},
      {with(good, {{"TORCHELASTIC_RESTART_COUNT", "x"}}),
       {"TORCHELASTIC_RESTART_COUNT='x' is not an integer"}},
      {with(good, {{"RANK", "2"}, {"MASTER_PORT", "0"}}),
       {"bad launch environment: RANK=2 is not below WORLD_SIZE=2; MASTER_PORT='0' is not a "
        "usable port"}},
      // Issue 26 item 22: a run id is printable ASCII and short, or refused naming it.
      {with(good, {{"DTLAUNCH_RUN_ID", "slurm-1\nOK: forged"}}),
       {"DTLAUNCH_RUN_ID='slurm-1\\nOK: forged' has a control character at byte 8"}},
      {with(good, {{"DTLAUNCH_RUN_ID", "a\x1b[2Jb"}}),
       {"DTLAUNCH_RUN_ID='a\\x1b[2Jb' has a control character at byte 2"}},
      {with(good, {{"DTLAUNCH_RUN_ID", std::string(100000, 'x')}}),
       {"DTLAUNCH_RUN_ID='xxx", "... (100000 bytes)' is 100000 bytes long; at most 128"}},
      {with(good, {{"DTLAUNCH_RUN_ID", "caf\xc3\xa9"}}),
       {"has a non-ASCII byte at byte 4; only printable ASCII is allowed"}},
  };
  for (const Case& c : cases) {
    std::string msg;
    try {
      parse_contract(c.env);
    } catch (const core::Error& e) {
      msg = e.what();
      CHECK(e.exit_status() == 2);
    }
    INFO(msg);
    for (const std::string& part : c.expected) CHECK(msg.find(part) != std::string::npos);
  }
  CHECK(parse_contract(good).node_rank == 0);
  CHECK(parse_contract(good).nnodes == 1);
  // The longest and the widest run ids that pass; an empty one counts as unset.
  for (const std::string& id : {std::string(128, 'x'), std::string(" !~slurm-1234.0")})
    CHECK(parse_contract(with(good, {{"DTLAUNCH_RUN_ID", id}})).dtlaunch_run_id == id);
  CHECK(!parse_contract(with(good, {{"DTLAUNCH_RUN_ID", ""}})).dtlaunch_run_id);
  CHECK(run_id_problem(std::string(129, 'x')) == "is 129 bytes long; at most 128 are allowed");
}

TEST_CASE("contract: the job key round-trips, and a bad one is named but never quoted") {
  WorkerContract w;
  w.master_addr = "h";
  w.master_port = 1;
  w.job_key = std::string(64, 'e');
  CHECK(parse_contract(apply_env({}, to_env(w, {}))) == w);
  const EnvMap bad = {{"RANK", "0"},
                      {"WORLD_SIZE", "1"},
                      {"MASTER_ADDR", "h"},
                      {"MASTER_PORT", "9"},
                      {"DTLAUNCH_JOB_KEY", "secret\x1b[2J"}};
  try {
    parse_contract(bad);
    FAIL("accepted");
  } catch (const dtlaunch::core::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("DTLAUNCH_JOB_KEY must be 64 hex digits (got 10 characters)") !=
          std::string::npos);
    CHECK(what.find("secret") == std::string::npos);
  }
}
