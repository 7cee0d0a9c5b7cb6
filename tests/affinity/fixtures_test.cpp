// The binding of every local rank, per mode, on machine shapes we cannot have in CI: the trees
// under fixtures/ (made by fixtures/make_fixtures.py) are read from their sysfs files exactly as
// a node's / is, with DTLAUNCH_TOPOLOGY_ROOT's code path. docs/affinity.md shows these tables.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "affinity/plan.hpp"
#include "affinity/read_topology.hpp"
#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch;
using namespace dtlaunch::affinity;

namespace {

struct Expect {
  const char* cpus;
  const char* mems;  // the NUMA nodes of the --mem-bind=local policy; "" for none
  unsigned cores;
};

struct Row {
  const char* fixture;
  CpuBind mode;
  std::vector<std::string> gpus;  // CUDA device id of each local rank; empty: no GPU
  std::vector<Expect> ranks;      // one per local rank
};

std::string root_of(const char* fixture) {
  return std::string(DTLAUNCH_AFFINITY_FIXTURES) + "/" + fixture;
}

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      // DGX H100: 2 x 56 cores x 2 threads; GPUs 0-3 on socket 0, 4-7 on socket 1.
      {"dgx-h100",
       CpuBind::kNuma,
       {"0", "1", "2", "3", "4", "5", "6", "7"},
       // 4 ranks per NUMA node of 56 cores: 14 threads each, not 56 each.
       {{"0-55,112-167", "0", 14},
        {"0-55,112-167", "0", 14},
        {"0-55,112-167", "0", 14},
        {"0-55,112-167", "0", 14},
        {"56-111,168-223", "1", 14},
        {"56-111,168-223", "1", 14},
        {"56-111,168-223", "1", 14},
        {"56-111,168-223", "1", 14}}},
      {"dgx-h100",
       CpuBind::kSocket,
       {"4", "0"},
       {{"56-111,168-223", "1", 56}, {"0-55,112-167", "0", 56}}},
      {"dgx-h100",
       CpuBind::kExclusive,
       {"0", "1", "2", "3", "4", "5", "6", "7"},
       {{"0-13,112-125", "0", 14},
        {"14-27,126-139", "0", 14},
        {"28-41,140-153", "0", 14},
        {"42-55,154-167", "0", 14},
        {"56-69,168-181", "1", 14},
        {"70-83,182-195", "1", 14},
        {"84-97,196-209", "1", 14},
        {"98-111,210-223", "1", 14}}},
      // GPUs named by UUID (what Slurm or a user may put in CUDA_VISIBLE_DEVICES).
      {"dgx-h100",
       CpuBind::kExclusive,
       {"GPU-00000007-1111-2222-3333-444444444444", "GPU-00000002-1111-2222-3333-444444444444"},
       {{"56-111,168-223", "1", 56}, {"0-55,112-167", "0", 56}}},
      {"dgx-h100",
       CpuBind::kCache,
       {"0", "5"},
       {{"0-55,112-167", "0", 56}, {"56-111,168-223", "1", 56}}},
      // CPU training: the ranks are spread over the node.
      {"dgx-h100",
       CpuBind::kExclusive,
       {},
       {{"0-55,112-167", "0", 56}, {"56-111,168-223", "1", 56}}},
      {"dgx-h100", CpuBind::kNone, {"0", "1"}, {{"0-223", "0-1", 112}, {"0-223", "0-1", 112}}},
      // A MIG instance cannot be located without NVML: the ranks are spread instead.
      {"dgx-h100",
       CpuBind::kNuma,
       {"MIG-1234", "MIG-5678"},
       {{"0-55,112-167", "0", 56}, {"56-111,168-223", "1", 56}}},

      // One socket of 16 cores x 2 threads, one GPU.
      {"one-socket-1gpu", CpuBind::kNuma, {"0"}, {{"0-31", "0", 16}}},
      {"one-socket-1gpu", CpuBind::kExclusive, {"0"}, {{"0-31", "0", 16}}},
      // Two ranks on the one GPU (--allow-gpu-sharing) split its NUMA node's cores.
      {"one-socket-1gpu",
       CpuBind::kExclusive,
       {"0", "0"},
       {{"0-7,16-23", "0", 8}, {"8-15,24-31", "0", 8}}},
      {"one-socket-1gpu",
       CpuBind::kExclusive,
       {},
       {{"0-3,16-19", "0", 4},
        {"4-7,20-23", "0", 4},
        {"8-11,24-27", "0", 4},
        {"12-15,28-31", "0", 4}}},

      // EPYC: 2 x 32 cores x 2 threads, an L3 per 8 cores; GPUs 0-1 on socket 0, 2-3 on 1.
      {"epyc-ccx",
       CpuBind::kCache,
       {"0", "1", "2", "3"},
       {{"0-7,64-71", "0", 8},
        {"16-23,80-87", "0", 8},
        {"32-39,96-103", "1", 8},
        {"48-55,112-119", "1", 8}}},
      {"epyc-ccx",
       CpuBind::kExclusive,
       {"0", "1", "2", "3"},
       {{"0-15,64-79", "0", 16},
        {"16-31,80-95", "0", 16},
        {"32-47,96-111", "1", 16},
        {"48-63,112-127", "1", 16}}},
      {"epyc-ccx",
       CpuBind::kNuma,
       {"0", "1", "2", "3"},
       {{"0-31,64-95", "0", 16},
        {"0-31,64-95", "0", 16},
        {"32-63,96-127", "1", 16},
        {"32-63,96-127", "1", 16}}},
      {"epyc-ccx",
       CpuBind::kCache,
       {},
       {{"0-7,64-71", "0", 8},
        {"8-15,72-79", "0", 8},
        {"16-23,80-87", "0", 8},
        {"24-31,88-95", "0", 8},
        {"32-39,96-103", "1", 8},
        {"40-47,104-111", "1", 8},
        {"48-55,112-119", "1", 8},
        {"56-63,120-127", "1", 8}}},

      // NPS4: 4 NUMA nodes of 4 cores per socket; GPUs on NUMA nodes 1, 3, 5 and 7.
      {"nps4",
       CpuBind::kNuma,
       {"0", "1", "2", "3"},
       {{"4-7,36-39", "1", 4},
        {"12-15,44-47", "3", 4},
        {"20-23,52-55", "5", 4},
        {"28-31,60-63", "7", 4}}},
      {"nps4",
       CpuBind::kSocket,
       {"0", "1", "2", "3"},
       {{"0-15,32-47", "0-3", 8},
        {"0-15,32-47", "0-3", 8},
        {"16-31,48-63", "4-7", 8},
        {"16-31,48-63", "4-7", 8}}},
      {"nps4",
       CpuBind::kNuma,
       {},
       {{"0-3,32-35", "0", 4},
        {"4-7,36-39", "1", 4},
        {"8-11,40-43", "2", 4},
        {"12-15,44-47", "3", 4},
        {"16-19,48-51", "4", 4},
        {"20-23,52-55", "5", 4},
        {"24-27,56-59", "6", 4},
        {"28-31,60-63", "7", 4}}},

      // CPU 5 is offline: core 5 has one thread left (CPU 13), and no rank gets CPU 5.
      {"offline-cpu", CpuBind::kExclusive, {}, {{"0-3,8-11", "0", 4}, {"4,6-7,12-15", "0", 4}}},
      {"offline-cpu", CpuBind::kNuma, {}, {{"0-4,6-15", "0", 8}}},

      // The task inherited 2-5,10-13 (2 cores of each socket) and the memory of node 0.
      {"narrow-mask",
       CpuBind::kExclusive,
       {"0", "1"},
       {{"2-3,10-11", "0", 2}, {"4-5,12-13", "", 2}}},
      {"narrow-mask", CpuBind::kSocket, {"1"}, {{"4-5,12-13", "", 2}}},
      {"narrow-mask", CpuBind::kNone, {}, {{"2-5,10-13", "0", 4}}},
  };
  return table;
}

}  // namespace

TEST_CASE("each fixture's binding per mode and local rank", "[affinity]") {
  for (const Row& row : rows()) {
    const std::string root = root_of(row.fixture);
    const Topology topology = read_topology(root);
    const TaskMask mask = read_task_mask(root, topology);
    const std::uint32_t nlocal = static_cast<std::uint32_t>(row.ranks.size());
    AffinityRequest request;
    request.cpu = row.mode;
    request.mem = MemBind::kLocal;
    request.task_cpus = mask.cpus;
    request.task_mems = mask.mems;
    request.gpu_of_local_rank.resize(nlocal);
    for (std::size_t l = 0; l < row.gpus.size(); ++l)
      request.gpu_of_local_rank[l] = find_gpu(topology, row.gpus[l], row.gpus, std::nullopt);
    for (std::uint32_t local = 0; local < nlocal; ++local) {
      INFO(row.fixture << " --cpu-bind=" << to_string(row.mode) << ", local rank " << local
                       << " of " << nlocal);
      request.local_rank = request.rank = local;
      const Binding b = plan_binding(topology, request);
      CHECK(b.cpus.to_list() == row.ranks[local].cpus);
      CHECK(b.mems.to_list() == row.ranks[local].mems);
      CHECK(b.cores == row.ranks[local].cores);
      const std::string mems = row.ranks[local].mems;
      const MemPolicy policy = mems.empty() ? MemPolicy::kNone
                               : mems.find_first_of(",-") == std::string::npos
                                   ? MemPolicy::kPreferred
                                   : MemPolicy::kPreferredMany;
      CHECK(b.policy == policy);
    }
  }
}

TEST_CASE("the fixtures read as the machines they describe", "[affinity]") {
  struct Shape {
    const char* fixture;
    std::size_t cpus, cores, numa, packages, caches, gpus;
  };
  const Shape shapes[] = {
      {"dgx-h100", 224, 112, 2, 2, 2, 8}, {"one-socket-1gpu", 32, 16, 1, 1, 1, 1},
      {"epyc-ccx", 128, 64, 2, 2, 8, 4},  {"nps4", 64, 32, 8, 2, 8, 4},
      {"offline-cpu", 15, 8, 1, 1, 1, 0}, {"narrow-mask", 16, 8, 2, 2, 2, 2},
  };
  for (const Shape& s : shapes) {
    INFO(s.fixture);
    const Topology t = read_topology(root_of(s.fixture));
    CHECK(t.online.size() == s.cpus);
    CHECK(t.cores.size() == s.cores);
    CHECK(t.numa.size() == s.numa);
    CHECK(t.packages.size() == s.packages);
    CHECK(t.caches.size() == s.caches);
    CHECK(t.gpus.size() == s.gpus);
  }
  const Topology dgx = read_topology(root_of("dgx-h100"));
  CHECK(dgx.gpus[4].bus_id == "0000:9d:00.0");
  CHECK(dgx.gpus[4].minor == 4);
  CHECK(dgx.gpus[4].uuid == "GPU-00000004-1111-2222-3333-444444444444");
  CHECK(dgx.gpus[4].numa_node == 1u);
  CHECK(dgx.gpus[4].local_cpus.to_list() == "56-111,168-223");
  const Topology narrow = read_topology(root_of("narrow-mask"));
  const TaskMask mask = read_task_mask(root_of("narrow-mask"), narrow);
  CHECK(mask.cpus.to_list() == "2-5,10-13");
  CHECK(mask.mems.to_list() == "0");
}

TEST_CASE("mem-bind strict on the narrowed fixture: node 1 is not allowed", "[affinity]") {
  const std::string root = root_of("narrow-mask");
  const Topology topology = read_topology(root);
  const TaskMask mask = read_task_mask(root, topology);
  AffinityRequest request{.cpu = CpuBind::kNuma,
                          .mem = MemBind::kStrict,
                          .rank = 9,
                          .local_rank = 1,
                          .gpu_of_local_rank = {0, 1},
                          .task_cpus = mask.cpus,
                          .task_mems = mask.mems};
  REQUIRE_THROWS_WITH(plan_binding(topology, request),
                      "rank 9 (local 1): --mem-bind=strict wants NUMA node(s) 1 (those of CPUs "
                      "4-5,12-13) but the task may allocate only on 0");
  request.local_rank = 0;
  const Binding b = plan_binding(topology, request);
  CHECK(b.policy == MemPolicy::kBind);
  CHECK(b.mems.to_list() == "0");
}

TEST_CASE("a root that is not a copy of a node's sys/ is an error naming the variable",
          "[affinity]") {
  const std::string root = std::string(DTLAUNCH_AFFINITY_FIXTURES) + "/no-such-machine";
  REQUIRE_THROWS_WITH(read_topology(root),
                      "DTLAUNCH_TOPOLOGY_ROOT='" + root +
                          "': has no sys/devices/system/cpu/online: not a copy of a node's sys/ "
                          "and proc/");
}

TEST_CASE("a topology tree with a huge, endless or unreadable file is refused, naming the file") {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("dtlaunch-topology-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::copy(root_of("one-socket-1gpu"), root, fs::copy_options::recursive);
  std::string file, says;
  SECTION("a file that links to /dev/zero (a file the topology is read from)") {
    file = "sys/devices/system/cpu/cpu0/topology/core_cpus";
    fs::remove(root / file);
    fs::create_symlink("/dev/zero", root / file);
    says = "is a link that leads out of the tree";
  }
  SECTION("a cpumap of 8 MB") {
    file = "sys/devices/system/node/node0/cpumap";
    std::ofstream(root / file) << std::string(8 << 20, 'f');
    says = "is larger than";
  }
  SECTION("a FIFO") {
    file = "proc/meminfo";
    fs::remove(root / file);
    REQUIRE(::mkfifo((root / file).c_str(), 0600) == 0);
    says = "is not a regular file";
  }
  SECTION("an online list that does not parse") {
    file = "sys/devices/system/cpu/online";
    std::ofstream(root / file) << "a-b\n";
    says = "is not a CPU list";
  }
  INFO(file);
  try {
    (void)read_topology(root.string());
    FAIL("read_topology accepted it");
  } catch (const core::Error& e) {
    INFO(e.what());
    CHECK(e.code() == core::ExitCode::kBadInput);
    CHECK(std::string(e.what()).find((root / file).string() + "' " + says) != std::string::npos);
  }
  fs::remove_all(root);
}
