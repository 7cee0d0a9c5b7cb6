// `dtlaunch doctor` and --preflight in local mode, as real processes: two launchers on loopback
// (--nnodes 2), one of them missing, and a preflight that fails before anything starts.
#include <regex>

#include "dtlaunch_catch.hpp"
#include "harness.hpp"
#include "launch/system.hpp"

using namespace proctest;
using namespace std::chrono_literals;

namespace {

const std::string kDtlaunch = DTLAUNCH;

std::vector<std::string> two_node_args(const std::string& port, int node,
                                       std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "--nnodes",         "2",         "--node-rank",   std::to_string(node),
      "--master-addr",    "127.0.0.1", "--master-port", port,
      "--nproc-per-node", "2",         "--run-id",      "doctor-test"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> doctor(std::vector<std::string> args) {
  args.insert(args.begin(), {kDtlaunch, "doctor"});
  return args;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("doctor: two local launchers (--nnodes 2) check the job and both exit 0", "[doctor]") {
  TempDir dir;
  become_subreaper();
  const std::string port = std::to_string(dtlaunch::find_free_port());
  Child node1(doctor(two_node_args(port, 1, {"--format", "json", "/bin/true"})), dir / "1.out",
              dir / "1.err");
  Child node0(doctor(two_node_args(port, 0, {"--format", "json", "/bin/true"})), dir / "0.out",
              dir / "0.err");
  const auto status0 = node0.wait_for(30s), status1 = node1.wait_for(30s);
  const std::string out0 = read_file(dir / "0.out");
  INFO(out0 << read_file(dir / "0.err") << read_file(dir / "1.err"));
  CHECK(status0 == 0);
  CHECK(status1 == 0);
  CHECK(out0.rfind("{\"ok\": true, \"ranks\": [", 0) == 0);
  CHECK(count_of(out0, "\"world_size\": 4") == 4);
  CHECK(out0.find("\"problems\": []") != std::string::npos);
  CHECK(read_file(dir / "1.out").empty());  // only rank 0 prints the report
  CHECK(settle(5s).empty());
}

TEST_CASE("doctor: a launcher that never comes is named, and the check ends at its timeout",
          "[doctor]") {
  TempDir dir;
  const std::string port = std::to_string(dtlaunch::find_free_port());
  const Ran ran = run_program(doctor(two_node_args(port, 0, {"--timeout", "1", "/bin/true"})), dir);
  INFO(ran.out << ran.err);
  CHECK(ran.status == 3);
  CHECK(ran.seconds < 5);
  CHECK(ran.out.find("ERROR missing-rank: rank 2 should run on node rank 1 as local rank 0, and "
                     "nothing came from node rank 1") != std::string::npos);
  CHECK(ran.out.find("ERROR unreachable: nothing came from node rank 1 (ranks 2-3)") !=
        std::string::npos);
}

TEST_CASE("doctor: a task that cannot reach rank 0 says why on one line and exits 3", "[doctor]") {
  TempDir dir;
  const std::string port = std::to_string(dtlaunch::find_free_port());
  const Ran ran = run_program(doctor(two_node_args(port, 1, {"--timeout", "1", "/bin/true"})), dir);
  CHECK(ran.status == 3);
  CHECK(ran.out.empty());
  CHECK(ran.err == "dtlaunch doctor: rank 2 on " +
                       split_lines(read_file("/proc/sys/kernel/hostname")).front() +
                       " cannot reach rank 0 at 127.0.0.1:" + port +
                       ": connection refused at 127.0.0.1:" + port + "\n");
}

TEST_CASE("preflight: a check that fails starts nothing and exits 3", "[doctor]") {
  TempDir dir;
  const std::string port = std::to_string(dtlaunch::find_free_port());
  const std::string marker = dir / "started";
  std::vector<std::string> argv = {kDtlaunch, "--preflight", "--preflight-timeout", "1"};
  for (const std::string& a : two_node_args(port, 0, {"/bin/sh", "-c", "touch " + marker}))
    argv.push_back(a);
  const Ran ran = run_program(argv, dir);
  INFO(ran.out << ran.err);
  CHECK(ran.status == 3);
  CHECK(read_file(marker).empty());
  CHECK_FALSE(::access(marker.c_str(), F_OK) == 0);
  CHECK(ran.err.find("ERROR missing-rank: rank 2") != std::string::npos);  // on stderr
  CHECK(ran.out.empty());  // stdout is the program's
}

TEST_CASE("preflight: a check that passes starts the workers", "[doctor]") {
  TempDir dir;
  const Ran ran = run_program(
      {kDtlaunch, "--preflight", "--nproc-per-node", "2", "/bin/sh", "-c", "echo started $RANK"},
      dir);
  INFO(ran.err);
  CHECK(ran.status == 0);
  CHECK(ran.out.find("[rank 0] started 0") != std::string::npos);
  CHECK(ran.out.find("[rank 1] started 1") != std::string::npos);
  CHECK(ran.err.empty());
}

TEST_CASE("doctor: ranks whose CPUs are far from their GPU are flagged (DGX fixture)", "[doctor]") {
  // The topology of a DGX H100 (2 sockets, GPUs 0-3 on the first, 4-7 on the second) read
  // through DTLAUNCH_TOPOLOGY_ROOT; this process runs on CPUs of the first socket only.
  TempDir dir;
  const std::string script =
      "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 "
      "DTLAUNCH_TOPOLOGY_ROOT=" AFFINITY_FIXTURES
      "/dgx-h100 "
      "taskset -c 0 " +
      kDtlaunch + " doctor --format json --nproc-per-node 8 /bin/true";
  const Ran ran = run_program({"/bin/sh", "-c", script}, dir);
  INFO(ran.out << ran.err);
  CHECK(ran.status == 0);  // a warning
  CHECK(count_of(ran.out, "\"kind\": \"cpu-far-from-gpu\"") == 4);
  for (int rank = 4; rank < 8; ++rank)
    CHECK(ran.out.find("\"message\": \"rank " + std::to_string(rank) + " (") != std::string::npos);
  CHECK(count_of(ran.out, "\"cpus_far_from_gpu\": true") == 4);
  CHECK(count_of(ran.out, "\"gpu_local_cpus\": \"0-55,112-167\"") == 4);
}
