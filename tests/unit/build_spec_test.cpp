#include "launch/build_spec.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <set>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "fake_system.hpp"
#include "launch/port.hpp"
#include "slurm_env.hpp"

using namespace dtlaunch;
using namespace dtlaunch::launch;
using dtlaunch::core::EnvMap;
using dtlaunch_test::FakeSystem;
using dtlaunch_test::slurm_step_env;

namespace {
LaunchOptions with_program(std::vector<std::string> argv = {"sh", "-c", "true"}) {
  LaunchOptions o;
  o.argv = std::move(argv);
  return o;
}
LaunchSpec slurm_spec(const EnvMap& env, const LaunchOptions& o, const System& sys) {
  return spec_from_slurm(read_inputs(env, Mode::kSlurm), o, sys);
}
LaunchSpec local_spec(const EnvMap& env, const LaunchOptions& o, const System& sys) {
  return spec_from_local(read_inputs(env, Mode::kLocal), o, sys);
}
// A regular file without execute permission (as root, access(X_OK) still needs an x bit).
std::string make_plain_file() {
  char path[] = "/tmp/dtlaunch-test-plain-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::fchmod(fd, 0644);
  ::close(fd);
  return path;
}
int status_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const core::Error& e) {
    if (message) *message = e.what();
    return e.exit_status();
  }
  return 0;
}
}  // namespace

TEST_CASE("slurm spec: every task of a step agrees on master and port") {
  FakeSystem sys;
  const LaunchOptions o = with_program();
  std::set<std::pair<std::string, std::uint16_t>> masters;
  for (int rank = 0; rank < 6; ++rank) {
    LaunchSpec s = slurm_spec(slurm_step_env(rank, rank % 2, rank / 2), o, sys);
    masters.insert({s.master.addr, s.master.port});
    CHECK(s.world_size == 6);
    CHECK(s.nnodes == 3);
    CHECK(s.node_rank == static_cast<std::uint32_t>(rank / 2));
    CHECK(s.local_world_size == 2);
    CHECK(s.program_path == "/usr/bin/sh");
  }
  REQUIRE(masters.size() == 1);
  CHECK(masters.begin()->first == "node1");
  CHECK(masters.begin()->second == master_port_for(4242, 0, 0));
}

TEST_CASE("slurm spec: a user's MASTER_ADDR/PORT or the options win, and are noted") {
  FakeSystem sys;
  EnvMap env = slurm_step_env();
  env.set("MASTER_ADDR", "10.0.0.5");
  env.set("MASTER_PORT", "29600");
  LaunchSpec s = slurm_spec(env, with_program(), sys);
  CHECK(s.master.addr == "10.0.0.5");
  CHECK(s.master.port == 29600);
  bool noted = false;
  for (const Note& n : s.notes)
    noted |= n.text == "MASTER_ADDR=10.0.0.5 kept: it was already set in the environment";
  CHECK(noted);

  LaunchOptions o = with_program();
  o.master_addr = "ib-node1";
  o.master_port = 31000;
  s = slurm_spec(env, o, sys);
  CHECK(s.master.addr == "ib-node1");
  CHECK(s.master.port == 31000);

  env.set("MASTER_PORT", "70000");
  std::string msg;
  CHECK(status_of([&] { slurm_spec(env, with_program(), sys); }, &msg) == 2);
  CHECK(msg == "MASTER_PORT='70000': expected a port in 1..65535");
}

TEST_CASE("slurm spec: the port range can be moved, and overlap with the ephemeral range warns") {
  FakeSystem sys;
  EnvMap env = slurm_step_env();
  env.set("DTLAUNCH_PORT_RANGE", "40000-40099");
  LaunchSpec s = slurm_spec(env, with_program(), sys);
  CHECK(s.master.port >= 40000);
  CHECK(s.master.port <= 40099);
  bool warned = false;
  for (const Note& n : s.notes)
    warned |= n.level == Note::Level::kWarn && n.text.find("ephemeral") != std::string::npos;
  CHECK(warned);

  env.erase("DTLAUNCH_PORT_RANGE");
  s = slurm_spec(env, with_program(), sys);
  for (const Note& n : s.notes) CHECK(n.level != Note::Level::kWarn);
}

TEST_CASE("slurm spec: arbitrary distribution takes rank 0's node from SLURM_HOSTFILE") {
  FakeSystem sys;
  sys.files["/tmp/hosts"] = "# rank order\nnode2\nnode1\nnode3\n";
  EnvMap env = slurm_step_env(1, 0, 0);
  env.set("SLURM_DISTRIBUTION", "arbitrary");
  env.set("SLURM_HOSTFILE", "/tmp/hosts");
  env.set("SLURM_STEP_TASKS_PER_NODE", "2(x3)");
  CHECK(slurm_spec(env, with_program(), sys).master.addr == "node2");

  // rank 0 itself, on node index 1 (node2), agrees.
  EnvMap rank0 = env;
  rank0.set("SLURM_PROCID", "0");
  rank0.set("SLURM_NODEID", "1");
  CHECK(slurm_spec(rank0, with_program(), sys).master.addr == "node2");

  std::string msg;
  env.set("SLURM_HOSTFILE", "/nonexistent");
  CHECK(status_of([&] { slurm_spec(env, with_program(), sys); }, &msg) == 2);
  CHECK(msg ==
        "SLURM_HOSTFILE='/nonexistent': cannot be read on this node, so the node of rank 0 "
        "is unknown; pass --master-addr HOST (the node that runs rank 0)");

  LaunchOptions o = with_program();
  o.master_addr = "node2";
  CHECK(slurm_spec(env, o, sys).master.addr == "node2");  // no need to read the hostfile

  env.erase("SLURM_HOSTFILE");
  CHECK(status_of([&] { slurm_spec(env, with_program(), sys); }, &msg) == 2);
  CHECK(msg.find("SLURM_HOSTFILE is not set") != std::string::npos);

  sys.files["/tmp/other"] = "node9\n";
  env.set("SLURM_HOSTFILE", "/tmp/other");
  CHECK(status_of([&] { slurm_spec(env, with_program(), sys); }, &msg) == 2);
  CHECK(msg.find("first host 'node9' is not in the step's node list") != std::string::npos);
}

TEST_CASE("slurm spec: rank 0 away from the first node under a non-arbitrary layout is refused") {
  FakeSystem sys;
  EnvMap env = slurm_step_env(0, 0, 1);
  std::string msg;
  CHECK(status_of([&] { slurm_spec(env, with_program(), sys); }, &msg) == 2);
  CHECK(msg.find("rank 0 runs on node 1 (node2)") != std::string::npos);
}

TEST_CASE("slurm spec: cyclic and plane layouts keep rank 0 on the first node") {
  FakeSystem sys;
  for (const char* dist : {"cyclic", "plane=2", "block:cyclic", "cyclic:block", "block,Pack"}) {
    EnvMap env = slurm_step_env(1, 0, 1);
    env.set("SLURM_DISTRIBUTION", dist);
    CHECK(slurm_spec(env, with_program(), sys).master.addr == "node1");
  }
}

TEST_CASE("slurm spec: OMP_NUM_THREADS from SLURM_CPUS_PER_TASK, else 1, never over the user's") {
  FakeSystem sys;
  EnvMap env = slurm_step_env();
  CHECK(slurm_spec(env, with_program(), sys).omp_num_threads == "1");
  env.set("SLURM_CPUS_PER_TASK", "12");
  CHECK(slurm_spec(env, with_program(), sys).omp_num_threads == "12");
  env.set("OMP_NUM_THREADS", "3");
  CHECK_FALSE(slurm_spec(env, with_program(), sys).omp_num_threads.has_value());
}

TEST_CASE("slurm spec: GPUs from CUDA_VISIBLE_DEVICES, device files or --gpus-per-node") {
  using Vars = std::vector<std::pair<std::string, std::string>>;
  using Ids = std::vector<std::string>;
  struct Case {
    const char* what;
    Vars set;  // on top of a 2-tasks-per-node step
    std::uint32_t device_files = 0;
    std::optional<std::uint32_t> gpus_per_node;
    Ids visible;  // expected, when no error
    bool from_cuda_visible_devices = false;
    bool isolated_by_slurm = false;
    std::string error = {};  // expected message (prefix), exit 2
  };
  const std::vector<Case> cases = {
      {"no GPU at all", {}, 0, {}, {}},
      {"device files", {}, 4, {}, {"0", "1", "2", "3"}},
      {"allocated GPUs, no CUDA_VISIBLE_DEVICES: CUDA sees 0,1",
       {{"SLURM_STEP_GPUS", "5,7"}},
       4,
       {},
       {"0", "1"}},
      {"allocated to the job", {{"SLURM_JOB_GPUS", "2,3,4"}}, 0, {}, {"0", "1", "2"}},
      {"CUDA_VISIBLE_DEVICES wins",
       {{"SLURM_STEP_GPUS", "5,7"}, {"CUDA_VISIBLE_DEVICES", "6,7"}},
       4,
       {},
       {"6", "7"},
       true},
      {"one GPU for two tasks, not per-task isolation: refused before exec",
       {{"CUDA_VISIBLE_DEVICES", "0"}},
       0,
       {},
       {},
       false,
       false,
       "1 GPU(s) (CUDA_VISIBLE_DEVICES='0') for 2 ranks on this node"},
      {"srun --gpus-per-task=1 says so only in SLURMD_TRES_BIND",
       {{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURMD_TRES_BIND", "gpu:per_task:1"}},
       0,
       {},
       {"0"},
       true,
       true},
      {"--gpu-bind=single:1",
       {{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURMD_TRES_BIND", "gpu:single:1"}},
       0,
       {},
       {"0"},
       true,
       true},
      {"--gpus-per-task=1 in the allocation: Slurm narrowed each task's list",
       {{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURM_GPUS_PER_TASK", "1"}},
       0,
       {},
       {"0"},
       true,
       true},
      {"--gpus-per-node narrows CUDA_VISIBLE_DEVICES",
       {{"CUDA_VISIBLE_DEVICES", "0,1,2"}},
       0,
       2,
       {"0", "1"},
       true},
      {"--gpus-per-node overrides the count", {}, 8, 2, {"0", "1"}},
      {"--gpus-per-node beyond CUDA_VISIBLE_DEVICES",
       {{"CUDA_VISIBLE_DEVICES", "0,1"}},
       0,
       3,
       {},
       false,
       false,
       "CUDA_VISIBLE_DEVICES='0,1': lists fewer devices than --gpus-per-node=3"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    FakeSystem sys;
    sys.gpu_files = c.device_files;
    EnvMap env = slurm_step_env();
    for (const auto& [name, value] : c.set) env.set(name, value);
    LaunchOptions o = with_program();
    o.gpus_per_node = c.gpus_per_node;
    std::string msg;
    LaunchSpec s;
    const int status = status_of([&] { s = slurm_spec(env, o, sys); }, &msg);
    if (!c.error.empty()) {
      CHECK(status == 2);
      CHECK(msg.rfind(c.error, 0) == 0);
      continue;
    }
    REQUIRE(status == 0);
    CHECK(s.gpu.visible == c.visible);
    CHECK(s.gpu.from_cuda_visible_devices == c.from_cuda_visible_devices);
    CHECK(s.gpu.isolated_by_slurm == c.isolated_by_slurm);
  }
}

TEST_CASE("slurm spec: program not found is 127, not executable is 126") {
  FakeSystem sys;
  std::string msg;
  CHECK(status_of([&] { slurm_spec(slurm_step_env(), with_program({"no-such-program-xyz"}), sys); },
                  &msg) == 127);
  CHECK(msg == "no-such-program-xyz: command not found in PATH");
  const std::string plain_file = make_plain_file();
  CHECK(status_of([&] { slurm_spec(slurm_step_env(), with_program({plain_file}), sys); }, &msg) ==
        126);
  CHECK(msg == plain_file + ": cannot execute: Permission denied");
  ::unlink(plain_file.c_str());
  CHECK(status_of([&] { slurm_spec(slurm_step_env(), with_program({"/nonexistent/x"}), sys); }) ==
        127);
  CHECK(status_of([&] { slurm_spec(slurm_step_env(), with_program({"/tmp"}), sys); }) == 126);
  CHECK(status_of([&] { slurm_spec(slurm_step_env(), with_program({}), sys); }) == 2);
}

TEST_CASE("mode: chosen from the options and the environment, contradictions refused") {
  LaunchOptions o = with_program();
  CHECK(resolve_mode(o, detect_slurm(slurm_step_env())) == Mode::kSlurm);
  std::string msg;
  CHECK(status_of([&] { resolve_mode(o, detect_slurm(EnvMap{})); }, &msg) == 2);
  CHECK(msg.find("not inside a Slurm step") == 0);
  o.nproc_per_node = 4;
  CHECK(resolve_mode(o, detect_slurm(EnvMap{})) == Mode::kLocal);
  CHECK(resolve_mode(o, detect_slurm(slurm_step_env())) ==
        Mode::kLocal);  // read_inputs reads the step, spec_from_local checks it
  o.mode = Mode::kSlurm;
  CHECK(status_of([&] { resolve_mode(o, detect_slurm(slurm_step_env())); }) == 2);
  o = with_program();
  o.mode = Mode::kLocal;
  CHECK(status_of([&] { resolve_mode(o, detect_slurm(EnvMap{})); }) == 2);
  o = with_program();
  o.nnodes = 2;
  CHECK(status_of([&] { resolve_mode(o, detect_slurm(EnvMap{})); }, &msg) == 2);
  CHECK(msg.find("add --nproc-per-node") != std::string::npos);
}

TEST_CASE("local spec: standalone uses loopback and a free port") {
  FakeSystem sys;
  LaunchOptions o = with_program();
  o.nproc_per_node = 4;
  sys.port = 45678;
  LaunchSpec s = local_spec(EnvMap{{"PATH", "/bin"}}, o, sys);
  CHECK(sys.free_port_calls == 1);
  CHECK(s.master.addr == "127.0.0.1");
  CHECK(s.master.port == 45678);
  CHECK(s.world_size == 4);
  CHECK(s.local_world_size == 4);
  CHECK(s.first_rank_on_node == 0);
}

TEST_CASE("local spec: several nodes need an agreed address and port") {
  FakeSystem sys;
  LaunchOptions o = with_program();
  o.nproc_per_node = 8;
  o.nnodes = 2;
  o.node_rank = 1;
  std::string msg;
  CHECK(status_of([&] { local_spec(EnvMap{}, o, sys); }, &msg) == 2);
  CHECK(msg.find("needs --master-addr") != std::string::npos);
  o.master_addr = "host0";
  CHECK(status_of([&] { local_spec(EnvMap{}, o, sys); }, &msg) == 2);
  CHECK(msg.find("needs --master-port") != std::string::npos);
  o.master_port = 29500;
  LaunchSpec s = local_spec(EnvMap{}, o, sys);
  CHECK(s.world_size == 16);
  CHECK(s.first_rank_on_node == 8);
  CHECK(s.node_rank == 1);
  o.node_rank = 2;
  CHECK(status_of([&] { local_spec(EnvMap{}, o, sys); }, &msg) == 2);
  CHECK(msg == "--node-rank 2 is not below --nnodes 2");
  CHECK(sys.free_port_calls == 0);
}

TEST_CASE("local spec: a missing program fails before a port is bound") {
  FakeSystem sys;
  LaunchOptions o = with_program({"no-such-program-xyz"});
  o.nproc_per_node = 2;
  CHECK(status_of([&] { local_spec(EnvMap{{"PATH", "/bin"}}, o, sys); }) == 127);
  CHECK(sys.free_port_calls == 0);
}

TEST_CASE("local spec under srun: one launcher per node takes the nodes from Slurm") {
  FakeSystem sys;
  EnvMap env = slurm_step_env(1, 0, 1);
  env.set("SLURM_STEP_NUM_TASKS", "3");
  env.set("SLURM_STEP_TASKS_PER_NODE", "1(x3)");
  LaunchOptions o = with_program();
  o.nproc_per_node = 8;
  LaunchSpec s = local_spec(env, o, sys);
  CHECK(s.nnodes == 3);
  CHECK(s.node_rank == 1);
  CHECK(s.world_size == 24);
  CHECK(s.first_rank_on_node == 8);
  CHECK(s.master.addr == "node1");
  CHECK(s.master.port == master_port_for(4242, 0, 0));

  std::string msg;
  CHECK(status_of([&] { local_spec(slurm_step_env(), o, sys); }, &msg) == 2);
  CHECK(msg.find("would start 48 workers") != std::string::npos);
  CHECK(sys.free_port_calls == 0);
}

TEST_CASE("read_inputs: one reader, empty is unset except for CUDA_VISIBLE_DEVICES") {
  EnvMap env = slurm_step_env();
  env.set("MASTER_PORT", "");
  env.set("CUDA_VISIBLE_DEVICES", "");
  env.set("OMP_NUM_THREADS", "6");
  env.set("SLURM_JOB_GPUS", "0,1");
  env.set("DTLAUNCH_TOPOLOGY_ROOT", "/fixture");
  const LaunchInputs in = read_inputs(env, Mode::kSlurm);
  REQUIRE(in.step);
  CHECK(in.slurm == SlurmContext::kStep);
  CHECK_FALSE(in.master_port);
  CHECK(in.cuda_visible_devices == std::optional<std::string>(""));
  CHECK(in.omp_num_threads == std::optional<std::string>("6"));
  CHECK(in.slurm_job_gpus == std::optional<std::string>("0,1"));
  CHECK(in.topology_root == "/fixture");

  // Local mode reads the step only inside one (srun --ntasks-per-node=1 dtlaunch
  // --nproc-per-node N); in a batch script it still counts the job's GPUs.
  EnvMap batch{{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", "3"}};
  const LaunchInputs local = read_inputs(batch, Mode::kLocal);
  CHECK(local.slurm == SlurmContext::kJobWithoutStep);
  CHECK_FALSE(local.step);
  CHECK(local.slurm_job_gpus == std::optional<std::string>("3"));
  CHECK(read_inputs(slurm_step_env(), Mode::kLocal).step);
  // Under --mode slurm a job without a step is refused with the reason, before anything else.
  std::string msg;
  CHECK(status_of([&] { read_inputs(batch, Mode::kSlurm); }, &msg) == 2);
}
