// The doctor's judgement on hand-made reports (lib/doctor/checks.hpp): one case per problem kind.
#include <algorithm>

#include "core/error.hpp"
#include "doctor/checks.hpp"
#include "doctor_fixture.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch::doctor;
using dtlaunch::contract::WorkerContract;

namespace {

// srun -N3 --ntasks-per-node=2 on node[1-3], block distribution.
const Expectation kThreeNodes = doctor_fixture::layout(3);

TaskReport healthy(std::uint32_t rank) {
  return doctor_fixture::healthy(rank, 3);
}

std::vector<TaskReport> job() {
  std::vector<TaskReport> reports;
  for (std::uint32_t rank = 0; rank < 6; ++rank) reports.push_back(healthy(rank));
  return reports;
}

std::vector<std::string> kinds(const Diagnosis& v) {
  std::vector<std::string> out;
  for (const Problem& p : v.problems) out.push_back(p.kind);
  return out;
}

const Problem& only(const Diagnosis& v, const std::string& kind) {
  auto it = std::find_if(v.problems.begin(), v.problems.end(),
                         [&](const Problem& p) { return p.kind == kind; });
  REQUIRE(it != v.problems.end());
  return *it;
}

}  // namespace

TEST_CASE("doctor: a healthy job has no problem") {
  const Diagnosis v = diagnose(kThreeNodes, job());
  CHECK(v.ok());
  CHECK(v.problems.empty());
  CHECK(v.reports.size() == 6);
}

TEST_CASE("doctor: a missing rank is named with the host and local rank the layout gives it") {
  auto reports = job();
  reports.erase(reports.begin() + 3);  // rank 3: node2, local rank 1
  const Diagnosis v = diagnose(kThreeNodes, reports);
  CHECK_FALSE(v.ok());
  CHECK(kinds(v) == std::vector<std::string>{"missing-rank"});
  const Problem& p = only(v, "missing-rank");
  CHECK(p.ranks == std::vector<std::uint32_t>{3});
  CHECK(p.hosts == std::vector<std::string>{"node2"});
  CHECK(p.message ==
        "rank 3 should run on node2 as local rank 1, and it did not report (other ranks on node2 "
        "did)");
}

TEST_CASE("doctor: a node that sent nothing is unreachable, and its ranks are missing") {
  auto reports = job();
  reports.erase(reports.begin() + 4, reports.end());  // node3: ranks 4-5
  const Diagnosis v = diagnose(kThreeNodes, reports);
  CHECK(kinds(v) == std::vector<std::string>{"missing-rank", "missing-rank", "unreachable"});
  CHECK(v.problems[0].message ==
        "rank 4 should run on node3 as local rank 0, and nothing came from node3");
  const Problem& p = only(v, "unreachable");
  CHECK(p.hosts == std::vector<std::string>{"node3"});
  CHECK(p.ranks == std::vector<std::uint32_t>{4, 5});
  CHECK(p.message.find("cannot reach node1:29500") != std::string::npos);
}

TEST_CASE("doctor: the cyclic distribution places ranks round-robin") {
  const Expectation e = slurm_expectation({"a", "b"}, {2, 1}, "cyclic");
  REQUIRE(e.ranks.size() == 3);
  CHECK(e.ranks[0].host == "a");
  CHECK(e.ranks[1].host == "b");
  CHECK(e.ranks[2].host == "a");
  CHECK(e.ranks[2].local_rank == 1);
  CHECK(slurm_expectation({"a"}, {2}, "plane=4").ranks.empty());  // the layout does not say
}

TEST_CASE("doctor: two tasks claiming one rank") {
  auto reports = job();
  reports[5].contract.rank = 4;
  const Diagnosis v = diagnose(kThreeNodes, reports);
  const Problem& p = only(v, "duplicate-rank");
  CHECK(p.ranks == std::vector<std::uint32_t>{4});
  CHECK(p.hosts == std::vector<std::string>{"node3"});
  CHECK(only(v, "missing-rank").ranks == std::vector<std::uint32_t>{5});
}

TEST_CASE("doctor: tasks that disagree with rank 0 about the world or the rendezvous") {
  auto reports = job();
  reports[4].contract.world_size = 8;
  reports[5].contract.master_port = 29501;
  reports[2].contract.dtlaunch_run_id = "slurm-41.0";
  const Diagnosis v = diagnose(kThreeNodes, reports);
  const Problem& p = only(v, "world-mismatch");
  CHECK(p.ranks == std::vector<std::uint32_t>{4, 5, 2});
  CHECK(p.message.find("WORLD_SIZE 8 on rank 4 (node3) but 6 on rank 0") != std::string::npos);
  CHECK(p.message.find("MASTER_PORT 29501 on rank 5 (node3) but 29500 on rank 0") !=
        std::string::npos);
  CHECK(p.message.find("DTLAUNCH_RUN_ID slurm-41.0 on rank 2") != std::string::npos);
}

TEST_CASE("doctor: a host name that resolves to loopback, on several hosts only") {
  auto reports = job();
  reports[2].network.host_resolves_to = {"127.0.1.1"};
  reports[3].network.host_resolves_to = {"127.0.1.1"};
  Diagnosis v = diagnose(kThreeNodes, reports);
  const Problem& p = only(v, "host-resolves-to-loopback");
  CHECK(p.hosts == std::vector<std::string>{"node2"});
  CHECK(p.message.find("GLOO_SOCKET_IFNAME") != std::string::npos);
  CHECK(v.problems.size() == 1);  // once per host

  reports = job();
  reports[0].network.master_resolves_to = {"::1"};
  v = diagnose(kThreeNodes, reports);
  CHECK(only(v, "host-resolves-to-loopback").message.find("MASTER_ADDR node1 resolves to ::1") ==
        0);

  // All ranks on one machine (local mode): loopback is what they should use.
  std::vector<TaskReport> local = {healthy(0), healthy(1)};
  for (TaskReport& r : local) {
    r.network.host = "box";
    r.network.host_resolves_to = r.network.master_resolves_to = {"127.0.0.1"};
    r.contract.world_size = 2;
  }
  CHECK(diagnose(local_expectation(1, 2), local).problems.empty());
}

TEST_CASE("doctor: another build of the program or of dtlaunch on a node") {
  auto reports = job();
  reports[4].programs.program.hash = "00000000000000cc";
  reports[5].programs.program.hash = "00000000000000cc";
  reports[3].programs.launcher_version = "dtlaunch 0.0.9";
  const Diagnosis v = diagnose(kThreeNodes, reports);
  REQUIRE(kinds(v) == std::vector<std::string>{"program-differs", "program-differs"});
  CHECK(v.problems[0].hosts == std::vector<std::string>{"node3"});
  CHECK(v.problems[0].message.find("the program differs on node3: /opt/train") == 0);
  CHECK(v.problems[1].ranks == std::vector<std::uint32_t>{3});
  CHECK(v.problems[1].message.find("dtlaunch differs on node2") == 0);
}

TEST_CASE("doctor: two ranks bound to one GPU, unless sharing was asked for") {
  auto reports = job();
  reports[0].placement.bound_device = reports[1].placement.bound_device = "0";
  reports[2].placement.bound_device = "0";  // another host: not shared
  reports[3].placement.bound_device = "1";
  Diagnosis v = diagnose(kThreeNodes, reports);
  const Problem& p = only(v, "gpu-shared");
  CHECK(p.ranks == std::vector<std::uint32_t>{0, 1});
  CHECK(p.hosts == std::vector<std::string>{"node1"});
  reports[0].placement.gpu_sharing_allowed = reports[1].placement.gpu_sharing_allowed = true;
  CHECK(diagnose(kThreeNodes, reports).ok());
}

TEST_CASE("doctor: a rank whose CPUs are all on another NUMA node than its GPU") {
  auto reports = job();
  reports[1].placement.bound_device = "5";
  reports[1].placement.cpus = "0-7";
  reports[1].placement.gpu_local_cpus = "56-111,168-223";
  reports[1].placement.cpus_far_from_gpu = true;
  const Diagnosis v = diagnose(kThreeNodes, reports);
  CHECK(v.ok());  // slower, not broken
  const Problem& p = only(v, "cpu-far-from-gpu");
  CHECK(p.ranks == std::vector<std::uint32_t>{1});
  CHECK(p.message ==
        "rank 1 (node1) runs on CPUs 0-7, none of them local to its GPU 5 (CPUs "
        "56-111,168-223): --cpu-bind numa binds each rank next to its GPU (docs/affinity.md)");
}

TEST_CASE("doctor: warnings do not fail the check") {
  auto reports = job();
  reports[0].placement.gpu_isolated_by_slurm = true;
  reports[2].placement.gpus_on_node = 8;
  reports[2].resources.shm_bytes = 64ull << 20;
  reports[3].placement.gpus_on_node = 8;
  reports[3].resources.shm_bytes = 64ull << 20;  // same host: said once
  reports[4].resources.infiniband_devices = 2;
  reports[4].resources.memlock_bytes = 64 * 1024;
  reports[5].clock.sent_unix_ms = reports[5].clock.received_unix_ms + 3000;
  reports[1].clock.received_unix_ms = reports[0].clock.received_unix_ms + 12'000;
  reports[1].clock.sent_unix_ms = reports[1].clock.received_unix_ms;
  const Diagnosis v = diagnose(kThreeNodes, reports);
  CHECK(v.ok());
  CHECK(kinds(v) == std::vector<std::string>{"gpu-isolated", "small-shm", "memlock-limited",
                                             "slow-start", "clock-skew"});
  CHECK(only(v, "clock-skew").message == "the clock of node3 is 3 s ahead of rank 0's");
  CHECK(only(v, "slow-start").message == "rank 1 (node1) arrived 12 s after the first");
  CHECK(only(v, "small-shm").hosts == std::vector<std::string>{"node2"});
}

TEST_CASE("doctor: reports survive the wire form, odd bytes included") {
  TaskReport r = healthy(3);
  r.network.host = "we\\ird\nhost=x";
  r.resources.memlock_bytes = 65536;
  r.clock.sent_unix_ms = -5;
  r.network.master_resolves_to = {"10.0.0.1", "fe80::1%eth0"};
  TaskReport back = decode(encode(r));
  back.clock.received_unix_ms = r.clock.received_unix_ms;
  CHECK(back == r);
  CHECK_THROWS(decode("rank=x\n"));
  CHECK_THROWS(decode("no equals sign"));
}

TEST_CASE("doctor: a fact a report does not carry keeps its default, a malformed one is named") {
  TaskReport r = healthy(3);
  r.resources.memlock_bytes = 65536;
  r.placement.gpu_sharing_allowed = true;
  r.placement.gpus_on_node = 4;
  const std::string text = encode(r);
  // A report of a dtlaunch that does not know these facts: each topic's table leaves them.
  std::string older;
  for (std::size_t at = 0, eol; at < text.size(); at = eol + 1) {
    eol = text.find('\n', at);
    const std::string line = text.substr(at, eol + 1 - at);
    if (!line.starts_with("memlock_bytes=") && !line.starts_with("gpu_sharing_allowed=") &&
        !line.starts_with("gpus_on_node=") && !line.starts_with("launcher_size="))
      older += line;
  }
  REQUIRE(older.size() < text.size());
  const TaskReport back = decode(older);
  CHECK_FALSE(back.resources.memlock_bytes);
  CHECK_FALSE(back.placement.gpu_sharing_allowed);
  CHECK(back.placement.gpus_on_node == 0);
  CHECK(back.programs.launcher.size == 0);
  CHECK(back.programs.launcher.path == r.programs.launcher.path);
  CHECK(back.network == r.network);
  CHECK(back.resources.shm_bytes == r.resources.shm_bytes);
  for (const char* bad : {"gpus_on_node=many\n", "gpu_sharing_allowed=2\n", "sent_unix_ms=x\n",
                          "launcher_size=-1\n"}) {
    INFO(bad);
    try {
      decode(text + bad);
      FAIL("decoded");
    } catch (const dtlaunch::core::Error& e) {
      const std::string key(bad, std::string_view(bad).find('='));
      CHECK(std::string(e.what()).find("doctor report: " + key + "=") != std::string::npos);
    }
  }
}

TEST_CASE("doctor: the whole contract travels with the report, and the first format still reads") {
  TaskReport r = healthy(3);
  r.contract.restart_count = 2;
  r.contract.max_restarts = 5;
  r.contract.torchelastic_run_id = "";  // set, and empty: not the same as unset
  r.contract.device = 0;
  r.contract.visible_devices = "GPU-5";
  r.contract.supervisor = "123-00ff";
  r.contract.omp_num_threads = "8";
  r.contract.pci_device_order = true;
  TaskReport back = decode(encode(r));
  back.clock.received_unix_ms = r.clock.received_unix_ms;
  CHECK(back.contract == r.contract);
  // A report without the "contract." keys (the first format) gives the rest their defaults.
  std::string first_format;
  const std::string text = encode(r);
  for (std::size_t at = 0, eol; at < text.size(); at = eol + 1) {
    eol = text.find('\n', at);
    if (text.compare(at, 9, "contract.") != 0) first_format += text.substr(at, eol + 1 - at);
  }
  const WorkerContract old = decode(first_format).contract;
  CHECK(old.rank == 3);
  CHECK(old.world_size == 6);
  CHECK(old.dtlaunch_run_id == "slurm-42.0");
  CHECK(old.local_world_size == 1);
  CHECK_FALSE(old.device);
  CHECK_FALSE(old.torchelastic_run_id);
}

TEST_CASE("doctor: the table has one row per node and the JSON the documented keys") {
  auto reports = job();
  reports.pop_back();
  const Diagnosis v = diagnose(kThreeNodes, reports);
  const std::string table = render_table(v);
  CHECK(table.find("node1  0-1") != std::string::npos);
  CHECK(table.find("node3  4 ") != std::string::npos);
  CHECK(table.find("ERROR missing-rank: rank 5 should run on node3 as local rank 1") !=
        std::string::npos);
  CHECK(table.find("FAILED") != std::string::npos);
  const std::string json = render_json(v);
  CHECK(json.rfind("{\"ok\": false, \"ranks\": [{\"rank\": 0, \"local_rank\": 0,", 0) == 0);
  CHECK(json.find("\"problems\": [{\"kind\": \"missing-rank\", \"severity\": \"error\", "
                  "\"ranks\": [5], \"hosts\": [\"node3\"], \"message\": ") != std::string::npos);
}

TEST_CASE("doctor: report fields in problem lines are escaped and bounded, whichever the field") {
  // Every text field of every report hostile: terminal escapes, a newline that would forge a
  // line of its own, and 60 KB. Then as many problems as possible, each of which quotes some.
  const std::string evil = "\x1b[2J\nOK: no problem found\r" + std::string(60000, 'h');
  std::vector<TaskReport> reports = job();
  for (TaskReport& r : reports) {
    const std::string tag = std::to_string(r.contract.rank);
    r.network.host = evil + tag;
    r.contract.master_addr = evil + "m" + tag;
    r.contract.dtlaunch_run_id = evil + "r" + tag;
    r.network.master_resolves_to = {"127.0.0.1" + evil};
    r.network.host_resolves_to = {"127.0.1.1" + evil};
    r.placement.bound_device = evil;
    r.placement.cpus = evil;
    r.placement.gpu_local_cpus = evil;
    r.placement.cpus_far_from_gpu = true;
    r.placement.gpus_on_node = 1;
    r.resources.shm_bytes = 1;
    r.resources.infiniband_devices = 1;
    r.resources.memlock_bytes = 64;
    r.placement.gpu_isolated_by_slurm = true;
    r.programs.program = {evil + "p" + tag, 1, evil + tag};
    r.programs.launcher = {evil + "l" + tag, 1, evil + tag};
    r.programs.launcher_version = evil + tag;
    r.clock.sent_unix_ms = 0;
    r.clock.received_unix_ms = 1'000'000 + 20'000 * r.contract.rank;
  }
  reports.push_back(reports[3]);  // duplicate-rank
  reports.pop_back();
  reports.push_back(reports[2]);
  reports.back().contract.rank = 9;  // not below the world size
  const Diagnosis v = diagnose(kThreeNodes, reports, {}, {});
  REQUIRE(v.problems.size() >= 10);
  for (const Problem& p : v.problems) {
    INFO(p.kind);
    CHECK(p.message.size() < 2000);
    CHECK(std::none_of(p.message.begin(), p.message.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }));
  }
  const std::string table = render_table(v);
  CHECK(table.find("\nOK: no problem found") == std::string::npos);
  CHECK(table.find('\x1b') == std::string::npos);
  CHECK(table.size() < 40000);
}

// The bytes between tasks of one dtlaunch version: any reshaping of TaskReport must keep them.
// The golden text was produced by the encoder of b4d5ba9 (the flat TaskReport).
TEST_CASE("doctor: a fully populated report encodes to the same bytes as before") {
  TaskReport r;
  r.contract = {.rank = 3,
                .local_rank = 1,
                .world_size = 6,
                .local_world_size = 2,
                .node_rank = 1,
                .nnodes = 3,
                .master_addr = "node1",
                .master_port = 29500,
                .restart_count = 2,
                .max_restarts = 5,
                .dtlaunch_run_id = "slurm-42.0",
                .torchelastic_run_id = "",
                .device = 1,
                .visible_devices = "GPU-5",
                .supervisor = "123-00ff",
                .omp_num_threads = "8",
                .pci_device_order = true,
                .job_key = std::nullopt};  // a secret: never in a report
  r.network.host = "node2";
  r.network.master_resolves_to = {"10.0.0.1", "fe80::1%eth0"};
  r.network.host_resolves_to = {"10.0.0.2"};
  r.network.local_addr = "10.0.0.2";
  r.placement.visible_devices = "0,1";
  r.placement.bound_device = "1";
  r.placement.gpu_sharing_allowed = true;
  r.placement.gpu_isolated_by_slurm = true;
  r.placement.gpus_on_node = 2;
  r.placement.cpus = "0-7";
  r.placement.gpu_local_cpus = "8-15";
  r.placement.cpus_far_from_gpu = true;
  r.placement.omp_num_threads = "8";
  r.resources.shm_bytes = 1 << 20;
  r.resources.memlock_bytes = 65536;
  r.resources.infiniband_devices = 1;
  r.programs.program = {"/bin/tr ain", 123, "00112233aabbccdd"};
  r.programs.exec_error = "/bin/tr ain: cannot execute: x\ny";
  r.programs.exec_status = 126;
  r.programs.launcher = {"/opt/dtlaunch", 456, "ffeeddccbbaa9988"};
  r.programs.launcher_version = "1.2.3";
  r.clock.sent_unix_ms = -5;
  r.clock.received_unix_ms = 77;  // set by rank 0, never sent
  r.software.env = {{"NCCL_DEBUG", "INFO"}, {"OMP_A", "b\\c"}};
  r.software.node_software = true;
  r.software.libraries = {{"libc.so.6", {"/lib/libc.so.6", 10, "0123456789abcdef"}},
                          {"libgone.so", {"", 0, ""}}};
  r.software.libraries_note = "note";
  r.software.driver_version = "550.54";
  r.software.gpu_models = {"H100", "H100"};
  r.software.kernel = "6.1.0";
  r.network_test_port = 40000;
  const std::string golden =
      "rank=3\nlocal_rank=1\nnode_rank=1\nworld_size=6\nnnodes=3\nmaster_addr=node1\n"
      "master_port=29500\nrun_id=slurm-42.0\ncontract.local_world_size=2\n"
      "contract.restart_count=2\ncontract.max_restarts=5\ncontract.torchelastic_run_id=\n"
      "contract.device=1\ncontract.visible_devices=GPU-5\ncontract.supervisor=123-00ff\n"
      "contract.omp_num_threads=8\ncontract.pci_device_order=1\n"
      "host=node2\nmaster_resolves_to=10.0.0.1,fe80::1%eth0\nhost_resolves_to=10.0.0.2\n"
      "local_addr=10.0.0.2\nvisible_devices=0,1\nbound_device=1\ngpu_sharing_allowed=1\n"
      "gpu_isolated_by_slurm=1\ngpus_on_node=2\ncpus=0-7\ngpu_local_cpus=8-15\n"
      "cpus_far_from_gpu=1\nomp_num_threads=8\nshm_bytes=1048576\nmemlock_bytes=65536\n"
      "infiniband_devices=1\nprogram=/bin/tr ain\nprogram_size=123\n"
      "program_hash=00112233aabbccdd\nprogram_exec_error=/bin/tr ain: cannot execute: x\\ny\n"
      "program_exec_status=126\nlauncher=/opt/dtlaunch\nlauncher_size=456\n"
      "launcher_hash=ffeeddccbbaa9988\nlauncher_version=1.2.3\nsent_unix_ms=-5\n"
      "env.NCCL_DEBUG=INFO\nenv.OMP_A=b\\\\c\nnode_software=1\n"
      "lib.libc.so.6=10 0123456789abcdef /lib/libc.so.6\nlib.libgone.so=0 - \n"
      "libraries_note=note\ndriver_version=550.54\ngpu_models=H100,H100\nkernel=6.1.0\n"
      "network_port=40000\n";
  CHECK(encode(r) == golden);
  TaskReport back = decode(golden);
  back.clock.received_unix_ms = r.clock.received_unix_ms;
  CHECK(back == r);
  // An unlimited memlock travels as a word, not a number.
  r.resources.memlock_bytes.reset();
  CHECK(encode(r).find("\nmemlock_bytes=unlimited\n") != std::string::npos);
  CHECK(decode(encode(r)).resources.memlock_bytes == std::nullopt);
}
