// build_topology on machine shapes as tables: what sysfs says of each CPU in, the groups in
// hwloc's logical order out. The fixtures (fixtures_test.cpp) read files; these cover what no
// fixture has: CPUs numbered across sockets, nodes numbered against the sockets, a VM, a kernel
// with package ids only. The orders across sockets were checked against hwloc 2.9 on sysfs
// trees of the same shapes.
#include "affinity/sysfs_topology.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtlaunch_catch.hpp"

using namespace dtlaunch::affinity;

namespace {

// Where one CPU sits; core and l3 are numbered within the package.
struct Cpu {
  unsigned cpu, package, node, l3, core;
};

CpuSet cpus_where(const std::vector<Cpu>& cpus, const std::function<bool(const Cpu&)>& where) {
  std::vector<unsigned> ids;
  for (const Cpu& c : cpus)
    if (where(c)) ids.push_back(c.cpu);
  return CpuSet(std::move(ids));
}

// What a current kernel says of such a machine: core_cpus, package_cpus and their ids, an L2
// per core and an L3, node cpulists; offline CPUs have no facts (Linux removes their topology/).
SysfsFacts facts_of(const std::vector<Cpu>& cpus, const CpuSet& offline) {
  SysfsFacts facts;
  facts.online = cpus_where(cpus, [&](const Cpu& c) { return !offline.contains(c.cpu); });
  for (const Cpu& c : cpus) {
    if (offline.contains(c.cpu)) continue;
    CpuFacts f;
    f.cpu = c.cpu;
    f.core_id = c.core;
    f.package_id = c.package;
    f.core =
        cpus_where(cpus, [&](const Cpu& o) { return o.package == c.package && o.core == c.core; });
    f.package = cpus_where(cpus, [&](const Cpu& o) { return o.package == c.package; });
    const CpuSet l3 =
        cpus_where(cpus, [&](const Cpu& o) { return o.package == c.package && o.l3 == c.l3; });
    f.caches = {{2, *f.core}, {3, l3}};
    facts.cpus.push_back(std::move(f));
  }
  std::set<unsigned> nodes;
  for (const Cpu& c : cpus) nodes.insert(c.node);
  for (unsigned n : nodes)
    facts.nodes.push_back({n, cpus_where(cpus, [&](const Cpu& o) { return o.node == n; })});
  return facts;
}

// sockets x cores x threads; CPU k of thread t of core i of socket s is numbered as Linux on x86
// does (all first threads, then all second threads), either socket after socket or, with
// `alternate`, the sockets in turn (CPU 0 on socket 0, CPU 1 on socket 1, ...). One NUMA node
// per socket unless nodes_per_socket; an L3 per l3_cores cores.
std::vector<Cpu> machine(unsigned sockets, unsigned cores, unsigned threads, bool alternate,
                         unsigned l3_cores, unsigned nodes_per_socket = 1) {
  std::vector<Cpu> out;
  for (unsigned t = 0; t < threads; ++t)
    for (unsigned n = 0; n < sockets * cores; ++n) {
      const unsigned s = alternate ? n % sockets : n / cores;
      const unsigned i = alternate ? n / sockets : n % cores;
      out.push_back({t * sockets * cores + n, s,
                     s * nodes_per_socket + i * nodes_per_socket / cores, i / l3_cores, i});
    }
  std::sort(out.begin(), out.end(), [](const Cpu& a, const Cpu& b) { return a.cpu < b.cpu; });
  return out;
}

std::string lists(const std::vector<CpuGroup>& groups, bool with_os_index) {
  std::ostringstream out;
  for (const CpuGroup& g : groups)
    out << (out.tellp() ? " " : "") << (with_os_index ? std::to_string(g.os_index) + ":" : "")
        << g.cpus.to_list();
  return out.str();
}

struct Row {
  const char* what;
  SysfsFacts facts;
  const char* cores;
  const char* numa;      // os_index:cpus
  const char* packages;  // os_index:cpus
  const char* caches;
};

std::vector<Row> rows() {
  SysfsFacts vm;  // CPU 2 has no facts at all, 0 and 1 an empty topology/
  vm.online = CpuSet({0, 1, 2});
  vm.cpus.resize(2);
  vm.cpus[1].cpu = 1;
  SysfsFacts ids_only = facts_of(machine(2, 2, 1, true, 2), {});
  for (CpuFacts& f : ids_only.cpus) f.package.reset();
  SysfsFacts no_ids = facts_of(machine(2, 2, 1, false, 2), {});
  for (CpuFacts& f : no_ids.cpus) f.package_id.reset();
  SysfsFacts cpu_less_node = facts_of(machine(1, 2, 1, false, 2), {});
  cpu_less_node.nodes.push_back({7, CpuSet()});
  SysfsFacts empty_map = facts_of(machine(1, 2, 2, false, 1), {});
  for (CpuFacts& f : empty_map.cpus) f.caches = {{3, CpuSet()}};
  SysfsFacts nodes_reversed = facts_of(machine(2, 2, 1, true, 2), {});
  std::swap(nodes_reversed.nodes[0].cpus, nodes_reversed.nodes[1].cpus);
  return {
      {"one socket, 4 cores x 2 threads", facts_of(machine(1, 4, 2, false, 2), {}),
       "0,4 1,5 2,6 3,7", "0:0-7", "0:0-7", "0-1,4-5 2-3,6-7"},
      {"2 sockets numbered in turn: the cores of socket 0 first",
       facts_of(machine(2, 4, 2, true, 4), {}), "0,8 2,10 4,12 6,14 1,9 3,11 5,13 7,15",
       "0:0,2,4,6,8,10,12,14 1:1,3,5,7,9,11,13,15", "0:0,2,4,6,8,10,12,14 1:1,3,5,7,9,11,13,15",
       "0,2,4,6,8,10,12,14 1,3,5,7,9,11,13,15"},
      {"2 sockets in turn, 2 nodes and 2 L3 each", facts_of(machine(2, 4, 1, true, 2, 2), {}),
       "0 2 4 6 1 3 5 7", "0:0,2 1:4,6 2:1,3 3:5,7", "0:0,2,4,6 1:1,3,5,7", "0,2 4,6 1,3 5,7"},
      {"CPU 1 offline: its core keeps CPU 5, no group holds 1",
       facts_of(machine(1, 4, 2, false, 4), CpuSet({1})), "0,4 2,6 3,7 5", "0:0,2-7", "0:0,2-7",
       "0,2-7"},
      {"a VM without topology/ nor node/: a core per CPU, one package, one node", vm, "0 1 2",
       "0:0-2", "0:0-2", ""},
      {"physical_package_id only (no package_cpus)", ids_only, "0 2 1 3", "0:0,2 1:1,3",
       "0:0,2 1:1,3", "0,2 1,3"},
      {"package_cpus without ids: numbered by position", no_ids, "0 1 2 3", "0:0-1 1:2-3",
       "0:0-1 1:2-3", "0-1 2-3"},
      {"a node without CPUs is dropped", cpu_less_node, "0 1", "0:0-1", "0:0-1", "0-1"},
      {"nodes numbered against the sockets: socket 0's node first", nodes_reversed, "0 2 1 3",
       "1:0,2 0:1,3", "0:0,2 1:1,3", "0,2 1,3"},
      {"an empty shared_cpu_map is the CPU's core's cache", empty_map, "0,2 1,3", "0:0-3", "0:0-3",
       "0,2 1,3"},
  };
}

}  // namespace

TEST_CASE("build_topology: groups and their order per machine shape", "[affinity]") {
  for (const Row& row : rows()) {
    INFO(row.what);
    const Topology t = build_topology(row.facts);
    CHECK(t.online == row.facts.online);
    CHECK(lists(t.cores, false) == row.cores);
    CHECK(lists(t.numa, true) == row.numa);
    CHECK(lists(t.packages, true) == row.packages);
    CHECK(lists(t.caches, false) == row.caches);
    CHECK(t.gpus.empty());
  }
}

TEST_CASE("parse_cpumask reads the kernel's hex words", "[affinity]") {
  struct Case {
    std::string text;
    const char* cpus;  // nullptr: refused
  };
  const Case cases[] = {
      {"3\n", "0-1"},
      {"00000000,00000101", "0,8"},
      {"ff,00000000\n", "32-39"},
      {"00000000", ""},
      {"8000,00000000,00000001", "0,79"},
      {"", nullptr},
      {"xyz", nullptr},
      {"123456789", nullptr},  // a word of more than 32 bits
      {",1", nullptr},
      {"1,", nullptr},
  };
  for (const Case& c : cases) {
    INFO("'" << c.text.substr(0, 40) << "'");
    const auto cpus = parse_cpumask(c.text);
    if (c.cpus)
      CHECK((cpus && cpus->to_list() == c.cpus));
    else
      CHECK_FALSE(cpus);
  }
  // CPU 65536, over kMaxCpuNumber.
  std::string huge = "1";
  for (int w = 0; w < 2048; ++w) huge += ",00000000";
  CHECK_FALSE(parse_cpumask(huge));
  CHECK(parse_cpumask(huge.substr(2))->empty());
}
