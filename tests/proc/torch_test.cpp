// The real PyTorch as a client of local mode: python3-torch's init_process_group("gloo",
// init_method="env://") on the environment the supervisor's workers get, with an all-reduce.
#include <map>
#include <regex>
#include <set>

#include "dtlaunch_catch.hpp"
#include "harness.hpp"
#include "launch/system.hpp"

using namespace proctest;
using namespace std::chrono_literals;

namespace {

const std::string kScript = TORCH_ALLREDUCE_PY;
// The real launcher when it is built; else the library's harness, which takes its options.
#ifdef DTLAUNCH
const std::string kLauncher = DTLAUNCH;
#else
const std::string kLauncher = PROC_DRIVER;
#endif

// The ranks that printed "rank R of W local L: sum S ok" with the right sum, from each line.
std::set<int> ranks_ok(const std::string& out, int world) {
  std::set<int> ok;
  const std::regex re("\\[rank (\\d+)\\] rank (\\d+) of (\\d+) local (\\d+): sum (\\d+) ok");
  for (const std::string& line : split_lines(out)) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    CHECK(m[1] == m[2]);
    CHECK(std::stoi(m[3]) == world);
    CHECK(std::stoi(m[5]) == world * (world + 1) / 2);
    ok.insert(std::stoi(m[1]));
  }
  return ok;
}

// Two launchers of --nnodes 2 on loopback, 2 ranks each, started in `order` with `options` in
// front of their own: both must end with 0, and each of the 4 ranks report the right sum from
// its own node (rank = node_rank * 2 + local_rank).
void run_two_nodes(const std::vector<std::string>& options, const std::vector<int>& order) {
  TempDir dir;
  become_subreaper();
  const std::string port = std::to_string(dtlaunch::launch::find_free_port());
  std::map<int, Child> nodes;
  for (int node : order) {
    const std::string n = std::to_string(node);
    std::vector<std::string> argv = {kLauncher};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(),
                {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", n, "--master-addr",
                 "127.0.0.1", "--master-port", port, "--", "/usr/bin/python3", kScript});
    nodes.try_emplace(node, argv, dir / ("node" + n + ".out"), dir / ("node" + n + ".err"));
  }
  std::set<int> ok;
  for (auto& [node, child] : nodes) {
    const std::string n = std::to_string(node);
    const std::optional<int> status = child.wait_for(120s);
    const std::string out = read_file(dir / ("node" + n + ".out"));
    INFO("node " << n << ":\n" << out << read_file(dir / ("node" + n + ".err")));
    CHECK(status == 0);
    for (int rank : ranks_ok(out, 4)) {
      CHECK(rank / 2 == node);
      ok.insert(rank);
    }
  }
  CHECK(ok == std::set<int>{0, 1, 2, 3});
  CHECK(settle(5s).empty());
}

}  // namespace

TEST_CASE("python3-torch gloo all-reduce with 4 local workers", "[torch]") {
  TempDir dir;
  const Ran ran = run_program(
      {kLauncher, "--nproc-per-node", "4", "--", "/usr/bin/python3", kScript}, dir, 120s);
  INFO(ran.out << ran.err);
  CHECK(ran.status == 0);
  CHECK(ranks_ok(ran.out, 4) == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("python3-torch across two launchers (--nnodes 2 on loopback)", "[torch]") {
  run_two_nodes({}, {0, 1});
}

#ifdef DTLAUNCH
TEST_CASE("preflight passes, then python3-torch binds and serves the very same port", "[torch]") {
  // The doctor's listener must be gone before the program starts: PyTorch's TCPStore on rank 0
  // binds MASTER_PORT right after the check, on both launchers.
  run_two_nodes({"--preflight", "--run-id", "preflight-torch"}, {1, 0});
}
#endif
