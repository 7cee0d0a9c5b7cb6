// Real workers on this machine: what the kernel says each one is bound to (its
// Cpus_allowed_list, the policy numa_maps shows for its heap, get_mempolicy), in local mode
// (applied between fork and exec) and on the Slurm path (applied to dtlaunch before exec).
// The expectations hold on any machine with at least 2 cores; on a 2-core machine they are
// exactly CPU 0 and CPU 1.
#include <map>
#include <string>
#include <vector>

#include "affinity/cpuset.hpp"
#include "affinity/read_topology.hpp"
#include "blackbox/run_process.hpp"
#include "dtlaunch_catch.hpp"

using dtlaunch::affinity::CpuSet;
using dtlaunch::core::EnvMap;
using namespace dtlaunch_test;

namespace {

const std::string kDtlaunch = DTLAUNCH_BIN;
const std::string kChild = AFFINITY_CHILD;

CpuSet cpus_of(const std::string& list) {
  auto set = CpuSet::parse(list);
  REQUIRE(set);
  return *set;
}

EnvMap base_env() {
  return EnvMap{{"PATH", "/usr/bin:/bin"}};
}

// This test process's own mask and the node: what the workers start from.
struct Machine {
  dtlaunch::affinity::Topology topology = dtlaunch::affinity::read_topology("/");
  dtlaunch::affinity::TaskMask mask = dtlaunch::affinity::read_task_mask("/", topology);
  std::size_t cores_in_mask() const {
    std::size_t n = 0;
    for (const auto& core : topology.cores) n += core.cpus.intersects(mask.cpus);
    return n;
  }
};

}  // namespace

TEST_CASE("local mode, 2 workers, --cpu-bind exclusive: a core each, memory preferred there",
          "[affinity]") {
  Machine machine;
  if (machine.cores_in_mask() < 2) {
    WARN("fewer than 2 cores in this test's mask: nothing to divide");
    return;
  }
  for (const char* mem : {"local", "strict"}) {
    INFO("--mem-bind " << mem);
    ProcessResult r = run_process(
        {kDtlaunch, "--nproc-per-node", "2", "--cpu-bind", "exclusive", "--mem-bind", mem, kChild},
        base_env());
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_status == 0);
    auto ranks = child_values_by_rank(r.out);
    REQUIRE(ranks.size() == 2);
    const CpuSet a = cpus_of(ranks[0]["cpus"]), b = cpus_of(ranks[1]["cpus"]);
    CHECK_FALSE(a.empty());
    CHECK_FALSE(b.empty());
    CHECK_FALSE(a.intersects(b));  // no core shared
    CHECK(machine.mask.cpus.contains(a | b));
    if (machine.mask.cpus.to_list() == "0-1" && machine.topology.cores.size() == 2) {
      CHECK(ranks[0]["cpus"] == "0");
      CHECK(ranks[1]["cpus"] == "1");
    }
    for (int rank : {0, 1}) {
      const std::string heap = ranks[rank]["heap"];
      CHECK(heap.rfind(std::string(mem) == "strict" ? "bind:" : "prefer:", 0) == 0);
      CHECK(ranks[rank]["mempolicy"].rfind(std::string(mem) == "strict" ? "2:" : "1:", 0) == 0);
      CHECK(ranks[rank]["omp"] != "");
    }
  }
}

TEST_CASE("under taskset -c 1 the inherited mask is kept", "[affinity]") {
  Machine machine;
  if (!machine.mask.cpus.contains(1)) {
    WARN("CPU 1 is not in this test's mask");
    return;
  }
  for (const char* mode : {"exclusive", "numa", "socket", "cache"}) {
    INFO("--cpu-bind " << mode);
    ProcessResult r = run_process({"/usr/bin/taskset", "-c", "1", kDtlaunch, "--nproc-per-node",
                                   "2", "--cpu-bind", mode, kChild},
                                  base_env());
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_status == 0);
    auto ranks = child_values_by_rank(r.out);
    CHECK(ranks[0]["cpus"] == "1");
    CHECK(ranks[1]["cpus"] == "1");
    CHECK(ranks[0]["omp"] == "1");
    // Two ranks for one core under exclusive: allowed, but never silently.
    CHECK((r.err.find("ranks share CPUs 1") != std::string::npos) ==
          (std::string(mode) == "exclusive"));
  }
}

TEST_CASE("cpu-bind none leaves the mask and the memory policy alone", "[affinity]") {
  Machine machine;
  ProcessResult r = run_process({kDtlaunch, "--nproc-per-node", "1", kChild}, base_env());
  REQUIRE(r.exit_status == 0);
  auto ranks = child_values_by_rank(r.out);
  CHECK(ranks[0]["cpus"] == machine.mask.cpus.to_list());
  CHECK(ranks[0]["heap"] == "default");
  CHECK(ranks[0]["mempolicy"].rfind("0:", 0) == 0);
}

TEST_CASE("Slurm path: dtlaunch binds itself, then execs the program", "[affinity]") {
  Machine machine;
  if (machine.cores_in_mask() < 2) {
    WARN("fewer than 2 cores in this test's mask: nothing to divide");
    return;
  }
  // Task 1 of a 2-task step on one node, as srun would start it (without srun's own binding).
  EnvMap env = base_env();
  for (auto [name, value] : std::map<std::string, std::string>{{"SLURM_JOB_ID", "77"},
                                                               {"SLURM_STEP_ID", "0"},
                                                               {"SLURM_PROCID", "1"},
                                                               {"SLURM_LOCALID", "1"},
                                                               {"SLURM_NODEID", "0"},
                                                               {"SLURM_STEP_NUM_TASKS", "2"},
                                                               {"SLURM_STEP_NUM_NODES", "1"},
                                                               {"SLURM_STEP_NODELIST", "localhost"},
                                                               {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                                               {"DTLAUNCH_CPU_BIND", "exclusive"}})
    env.set(name, value);
  ProcessResult r = run_process({kDtlaunch, kChild}, env);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_status == 0);
  auto self = child_values_by_rank(r.out)[0];
  const CpuSet cpus = cpus_of(self["cpus"]);
  CHECK_FALSE(cpus.empty());
  CHECK(cpus.size() < machine.mask.cpus.size());
  CHECK(self["heap"].rfind("prefer:", 0) == 0);
  if (machine.mask.cpus.to_list() == "0-1" && machine.topology.cores.size() == 2)
    CHECK(self["cpus"] == "1");

  // srun --cpu-bind=map_cpu:0 narrowed task 1 to CPU 0: kept, not widened to "its" core.
  env.set("SLURM_CPU_BIND_TYPE", "map_cpu:");
  r = run_process({"/usr/bin/taskset", "-c", "0", kDtlaunch, "-v", kChild}, env);
  REQUIRE(r.exit_status == 0);
  CHECK(child_values_by_rank(r.out)[0]["cpus"] == "0");
  CHECK(r.err.find("Slurm bound this task") != std::string::npos);
}

TEST_CASE("dry-run JSON of a fixture node: each worker's cpus and mems", "[affinity]") {
  EnvMap env = base_env();
  env.set("DTLAUNCH_TOPOLOGY_ROOT", std::string(DTLAUNCH_AFFINITY_FIXTURES) + "/dgx-h100");
  env.set("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7");
  ProcessResult r = run_process({kDtlaunch, "--nproc-per-node", "8", "--cpu-bind", "numa",
                                 "--dry-run", "--format", "json", kChild},
                                env);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("\"rank\": 3, \"local_rank\": 3, \"cpus\": \"0-55,112-167\", \"mems\": "
                   "\"0\", \"mem_policy\": \"preferred\"") != std::string::npos);
  CHECK(r.out.find("\"rank\": 4, \"local_rank\": 4, \"cpus\": \"56-111,168-223\", \"mems\": "
                   "\"1\", \"mem_policy\": \"preferred\"") != std::string::npos);
  // 4 ranks per NUMA node of 56 cores divide them.
  CHECK(r.out.find("\"OMP_NUM_THREADS\": \"14\"") != std::string::npos);
  CHECK(r.out.find("\"OMP_NUM_THREADS\": \"56\"") == std::string::npos);
  CHECK(r.out.find("\"CUDA_DEVICE_ORDER\": \"PCI_BUS_ID\"") != std::string::npos);
}
