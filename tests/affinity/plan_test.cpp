// The pure parts of the binding: the CPU list form, locating a GPU from what CUDA_VISIBLE_DEVICES
// names, the errors, and how the launch spec (Slurm and local) turns options, environment and a
// topology into each worker's binding and variables.
#include "affinity/plan.hpp"

#include <string>
#include <vector>

#include "../unit/fake_system.hpp"
#include "../unit/slurm_env.hpp"
#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "launch/build_spec.hpp"
#include "launch/worker_env.hpp"

using namespace dtlaunch;
using namespace dtlaunch::affinity;
using dtlaunch_test::contains_text;
using dtlaunch_test::FakeSystem;
using dtlaunch_test::slurm_step_env;

namespace {

CpuSet cpus(const char* list) {
  auto set = CpuSet::parse(list);
  REQUIRE(set);
  return *set;
}

// 2 sockets x 2 cores x 2 threads; core c is CPUs {c, c+4}; a NUMA node and an L3 per socket;
// GPU 0 (bus 0000:17:00.0) on node 0, GPU 1 (0000:ca:00.0, minor 0) on node 1.
Topology small_node() {
  Topology t;
  t.online = cpus("0-7");
  t.cores = {{0, cpus("0,4")}, {1, cpus("1,5")}, {2, cpus("2,6")}, {3, cpus("3,7")}};
  t.numa = {{0, cpus("0-1,4-5")}, {1, cpus("2-3,6-7")}};
  t.packages = t.numa;
  t.caches = t.numa;
  t.gpus = {{"0000:17:00.0", 1, "GPU-aaaa", cpus("0-1,4-5"), 0},
            {"0000:ca:00.0", 0, "GPU-bbbb", cpus("2-3,6-7"), 1}};
  return t;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    CHECK(e.exit_status() == 2);
    return e.what();
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_CASE("cpu lists: parse and print in the kernel's form") {
  const std::pair<const char*, const char*> cases[] = {
      {"0", "0"},     {"0-3", "0-3"}, {"3,1,2", "1-3"}, {"0-3,8-11", "0-3,8-11"},
      {"5,5,5", "5"}, {"", ""},       {"0-1\n", "0-1"}, {"1,3,5-6", "1,3,5-6"},
  };
  for (const auto& [in, out] : cases) {
    INFO(in);
    REQUIRE(CpuSet::parse(in));
    CHECK(CpuSet::parse(in)->to_list() == out);
  }
  for (const char* bad : {"a", "3-1", "1,", ",1", "1--2", "-1", "99999999", "1 2", "0-"}) {
    INFO(bad);
    CHECK_FALSE(CpuSet::parse(bad));
  }
  CHECK((cpus("0-7") & cpus("2-3,10")).to_list() == "2-3");
  CHECK((cpus("0-1") | cpus("4")).to_list() == "0-1,4");
  CHECK(cpus("0-7").contains(cpus("2-3")));
  CHECK_FALSE(cpus("0-7").intersects(cpus("8-9")));
}

TEST_CASE("option words") {
  CHECK(parse_cpu_bind("exclusive") == CpuBind::kExclusive);
  CHECK(parse_cpu_bind("cache") == CpuBind::kCache);
  CHECK_FALSE(parse_cpu_bind("cores"));
  CHECK(parse_mem_bind("strict") == MemBind::kStrict);
  CHECK_FALSE(parse_mem_bind("bind"));
  for (CpuBind b :
       {CpuBind::kNone, CpuBind::kNuma, CpuBind::kSocket, CpuBind::kExclusive, CpuBind::kCache})
    CHECK(parse_cpu_bind(to_string(b)) == b);
}

TEST_CASE("find_gpu: UUIDs, indices in bus order, Slurm's renumbering, MIG") {
  const Topology t = small_node();
  const std::vector<std::string> all = {"0", "1"};
  using Alloc = std::optional<std::vector<unsigned>>;
  struct Case {
    const char* id;
    std::vector<std::string> visible;
    Alloc allocated;
    std::optional<std::size_t> expect;
  };
  const Case cases[] = {
      {"GPU-bbbb", {"GPU-bbbb"}, std::nullopt, 1},
      {"GPU-cccc", {"GPU-cccc"}, std::nullopt, std::nullopt},
      {"MIG-GPU-aaaa/1/0", {"MIG-GPU-aaaa/1/0"}, std::nullopt, std::nullopt},
      {"0", all, std::nullopt, 0},  // bus order, not minor order
      {"1", all, std::nullopt, 1},
      {"2", all, std::nullopt, std::nullopt},
      // Slurm allocated minor 0 (bus 0000:ca) and renumbered it 0 under ConstrainDevices.
      {"0", {"0"}, Alloc{{0u}}, 1},
      // Slurm allocated minor 1 without constraining devices: CUDA sees both, index 1.
      {"1", {"1"}, Alloc{{1u}}, 1},
      // Both allocated, renumbered: index 0 is the first of them in bus order.
      {"0", all, Alloc{{1u, 0u}}, 0},
  };
  for (const Case& c : cases) {
    INFO(c.id);
    CHECK(find_gpu(t, c.id, c.visible, c.allocated) == c.expect);
  }
}

TEST_CASE("an empty intersection with the inherited mask names the rank, the mask and the CPUs") {
  AffinityRequest r;
  r.cpu = CpuBind::kNuma;
  r.rank = 13;
  r.local_rank = 1;
  r.gpu_of_local_rank = {0, 1};
  r.task_cpus = cpus("0-1,4-5");  // Slurm gave the task socket 0; its GPU is on socket 1
  r.task_mems = cpus("0-1");
  CHECK(message_of([&] { plan_binding(small_node(), r); }) ==
        "rank 13 (local 1): --cpu-bind=numa wants CPUs 2-3,6-7 (NUMA node 1 of GPU "
        "0000:ca:00.0) but its affinity mask is 0-1,4-5: no CPU in common; ask Slurm for CPUs "
        "there, or pass --cpu-bind=none");
  // A task Slurm bound on its own is alone in its mask: exclusive gives it all of it, where
  // ranks sharing the mask (and here the GPU) divide it.
  r.cpu = CpuBind::kExclusive;
  r.local_rank = 0;
  r.gpu_of_local_rank = {0, 0};
  r.shared_mask = false;
  const Binding b = plan_binding(small_node(), r);
  CHECK(b.cpus.to_list() == "0-1,4-5");
  CHECK(b.why.find("within the inherited mask 0-1,4-5") != std::string::npos);
  r.shared_mask = true;
  CHECK(plan_binding(small_node(), r).cpus.to_list() == "0,4");
}

TEST_CASE("more ranks than cores: they share, and say so") {
  AffinityRequest r;
  r.cpu = CpuBind::kExclusive;
  r.gpu_of_local_rank.resize(3);
  r.task_cpus = cpus("0,4");  // one core
  r.task_mems = cpus("0");
  for (std::uint32_t l = 0; l < 3; ++l) {
    r.local_rank = l;
    const Binding b = plan_binding(small_node(), r);
    CHECK(b.cpus.to_list() == "0,4");
    REQUIRE(b.warning);
    CHECK_THAT(*b.warning, contains_text("ranks share CPUs 0,4"));
  }
}

TEST_CASE("mem-bind alone, without cpu-bind: the policy covers the mask's NUMA nodes") {
  AffinityRequest r;
  r.mem = MemBind::kStrict;
  r.gpu_of_local_rank.resize(1);
  r.task_cpus = cpus("0-7");
  r.task_mems = cpus("0-1");
  const Binding b = plan_binding(small_node(), r);
  CHECK(b.cpus.to_list() == "0-7");
  CHECK(b.policy == MemPolicy::kBind);
  CHECK(b.mems.to_list() == "0-1");
  r.mem = MemBind::kLocal;
  CHECK(plan_binding(small_node(), r).policy == MemPolicy::kPreferredMany);
}

namespace {
launch::LaunchOptions local(std::uint32_t n) {
  launch::LaunchOptions o;
  o.nproc_per_node = n;
  o.argv = {"sh", "-c", "true"};
  return o;
}
FakeSystem small_system() {
  FakeSystem sys;
  sys.node = small_node();
  sys.mask = {cpus("0-7"), cpus("0-1")};
  return sys;
}
std::map<std::string, std::string> env_of(const launch::LaunchSpec& spec, std::uint32_t local_rank,
                                          const core::EnvMap& env) {
  std::map<std::string, std::string> m;
  for (const contract::EnvChange& c :
       launch::build_worker_env(spec, {local_rank, local_rank, 0}, env))
    m[c.name] = c.value.value_or("<unset>");
  return m;
}
}  // namespace

TEST_CASE("spec: the options, their variables and their defaults") {
  FakeSystem sys = small_system();
  core::EnvMap env{{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  launch::LaunchOptions o = local(2);

  // Off by default: the topology is not even read.
  launch::LaunchSpec spec =
      launch::spec_from_local(launch::read_inputs(env, launch::Mode::kLocal), o, sys);
  CHECK(spec.affinity.by_local_rank.empty());
  CHECK_FALSE(sys.topology_root);
  CHECK(env_of(spec, 0, env).count("CUDA_DEVICE_ORDER") == 0);
  CHECK(env_of(spec, 0, env)["OMP_NUM_THREADS"] == "1");

  // DTLAUNCH_CPU_BIND, mem-bind local by default, the GPU's NUMA node, cores as OMP threads.
  env.set("DTLAUNCH_CPU_BIND", "numa");
  spec = launch::spec_from_local(launch::read_inputs(env, launch::Mode::kLocal), o, sys);
  CHECK(sys.topology_root == "/");
  REQUIRE(spec.affinity.of(1));
  CHECK(spec.affinity.of(1)->cpus.to_list() == "2-3,6-7");
  CHECK(spec.affinity.of(1)->policy == MemPolicy::kPreferred);
  CHECK(env_of(spec, 1, env)["OMP_NUM_THREADS"] == "2");
  CHECK(env_of(spec, 1, env)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID");

  // The option wins over the variable; DTLAUNCH_MEM_BIND; the user's OMP and order are kept.
  o.cpu_bind = CpuBind::kExclusive;
  env.set("DTLAUNCH_MEM_BIND", "strict");
  env.set("OMP_NUM_THREADS", "7");
  env.set("DTLAUNCH_TOPOLOGY_ROOT", "/fixture");
  spec = launch::spec_from_local(launch::read_inputs(env, launch::Mode::kLocal), o, sys);
  CHECK(sys.topology_root == "/fixture");
  CHECK(spec.affinity.of(0)->cpus.to_list() == "0-1,4-5");  // alone on its NUMA node
  CHECK(spec.affinity.of(0)->policy == MemPolicy::kBind);
  CHECK(env_of(spec, 0, env).count("OMP_NUM_THREADS") == 0);
  env.set("CUDA_DEVICE_ORDER", "FASTEST_FIRST");
  spec = launch::spec_from_local(launch::read_inputs(env, launch::Mode::kLocal), o, sys);
  CHECK(env_of(spec, 0, env).count("CUDA_DEVICE_ORDER") == 0);
  // Indices then cannot be located: the ranks are spread over the node instead, with a warning.
  CHECK(spec.affinity.of(0)->why.find("no GPU to follow") != std::string::npos);
  bool warned = false;
  for (const launch::Note& n : spec.notes)
    warned |=
        n.level == launch::Note::Level::kWarn && n.text.find("FASTEST_FIRST") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("spec: bad values of the variables are one-line errors naming them") {
  FakeSystem sys = small_system();
  core::EnvMap env{{"PATH", "/usr/bin:/bin"}, {"DTLAUNCH_CPU_BIND", "cores"}};
  CHECK(message_of([&] {
          launch::spec_from_local(launch::read_inputs(env, launch::Mode::kLocal), local(2), sys);
        }) == "DTLAUNCH_CPU_BIND='cores': expected none, numa, socket, exclusive or cache");
  env = {{"PATH", "/usr/bin:/bin"}, {"DTLAUNCH_MEM_BIND", "bind"}};
  CHECK(message_of([&] {
          launch::spec_from_local(launch::read_inputs(env, launch::Mode::kLocal), local(2), sys);
        }) == "DTLAUNCH_MEM_BIND='bind': expected none, local or strict");
}

TEST_CASE("spec under Slurm: only this task's binding, Slurm's own binding is kept") {
  FakeSystem sys = small_system();
  core::EnvMap env = slurm_step_env(3, 1, 1);  // rank 3, local 1 of 2 on node 1
  launch::LaunchOptions o;
  o.argv = {"sh", "-c", "true"};
  o.cpu_bind = CpuBind::kExclusive;
  launch::LaunchSpec spec =
      launch::spec_from_slurm(launch::read_inputs(env, launch::Mode::kSlurm), o, sys);
  CHECK_FALSE(spec.affinity.of(0));
  REQUIRE(spec.affinity.of(1));
  CHECK(spec.affinity.of(1)->cpus.to_list() == "2-3,6-7");  // cores 2-3 of the 4, no GPU
  CHECK(spec.affinity.of(1)->why.rfind("rank 3 (local 1)", 0) == 0);

  // srun --cpu-bind=cores gave this task CPUs 1,5: it is alone in that mask and keeps it.
  env.set("SLURM_CPU_BIND_TYPE", "mask_cpu:");
  sys.mask.cpus = cpus("1,5");
  spec = launch::spec_from_slurm(launch::read_inputs(env, launch::Mode::kSlurm), o, sys);
  CHECK(spec.affinity.of(1)->cpus.to_list() == "1,5");
  bool said = false;
  for (const launch::Note& n : spec.notes)
    said |= n.text.find("Slurm bound this task (SLURM_CPU_BIND_TYPE=mask_cpu:) to CPUs 1,5") !=
            std::string::npos;
  CHECK(said);
}

TEST_CASE("ranks that share a domain divide its cores for OMP_NUM_THREADS") {
  AffinityRequest r;
  r.task_cpus = cpus("0-7");
  r.task_mems = cpus("0-1");
  SECTION("no GPU: 4 ranks spread over 2 NUMA nodes, 2 per node of 2 cores") {
    r.cpu = GENERATE(CpuBind::kNuma, CpuBind::kSocket, CpuBind::kCache);
    r.gpu_of_local_rank.resize(4);
  }
  SECTION("GPUs: 2 ranks on each GPU's NUMA node") {
    r.cpu = GENERATE(CpuBind::kNuma, CpuBind::kSocket);
    r.gpu_of_local_rank = {0, 0, 1, 1};
  }
  for (std::uint32_t l = 0; l < 4; ++l) {
    r.local_rank = l;
    const Binding b = plan_binding(small_node(), r);
    INFO(b.why);
    CHECK(b.cpus.size() == 4);
    CHECK(b.cores == 1);  // 2 cores, 2 ranks: not 2 threads each on the same 2 cores
    CHECK_THAT(b.why, contains_text("2 cores shared by 2 ranks: 1 thread each"));
  }
  // One rank alone in its domain keeps all of it.
  r.cpu = CpuBind::kNuma;
  r.gpu_of_local_rank = {0, 1};
  r.local_rank = 0;
  CHECK(plan_binding(small_node(), r).cores == 2);
}

TEST_CASE("a mask with no online CPU says so, with no empty list") {
  AffinityRequest r;
  r.cpu = CpuBind::kNuma;
  r.rank = 5;
  r.gpu_of_local_rank.resize(1);
  r.task_cpus = cpus("8-9");  // CPUs this node does not have online
  r.task_mems = cpus("0");
  CHECK(message_of([&] { plan_binding(small_node(), r); }) ==
        "rank 5 (local 0): --cpu-bind=numa: its affinity mask 8-9 holds no online CPU of this "
        "node (online: 0-7); ask Slurm for CPUs here, or pass --cpu-bind=none");
}
