// `dtlaunch doctor` and --preflight in local mode, as real processes: two launchers on loopback
// (--nnodes 2), one of them missing, and a preflight that fails before anything starts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <thread>

#include "doctor/launch_check.hpp"
#include "doctor/probe.hpp"
#include "doctor/server.hpp"
#include "dtlaunch_catch.hpp"
#include "harness.hpp"
#include "launch/system.hpp"
#include "launch/worker_env.hpp"

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

// A job of two local launchers (--nnodes 2) on a free loopback port: each `dtlaunch doctor`
// started when the test says, its output in dir/N.out and dir/N.err. The test is the subreaper
// of both; when it ends, nothing of theirs may be left.
struct TwoLaunchers {
  // What the two left once ended (each waited for at most 30 s, then killed).
  struct Ended {
    std::optional<int> status0, status1;
    std::string out0;    // node 0's, which prints the report
    std::string errors;  // both stderrs, for a failure's message
  };

  TwoLaunchers() { become_subreaper(); }
  ~TwoLaunchers() { CHECK(settle(5s).empty()); }
  TwoLaunchers(const TwoLaunchers&) = delete;
  TwoLaunchers& operator=(const TwoLaunchers&) = delete;

  std::vector<std::string> argv(int node, std::vector<std::string> extra) const {
    return doctor(two_node_args(port, node, std::move(extra)));
  }
  Child start(int node, const std::vector<std::string>& argv) const {
    return Child(argv, out(node), dir / (std::to_string(node) + ".err"));
  }
  std::string out(int node) const { return dir / (std::to_string(node) + ".out"); }
  std::string err_text(int node) const { return read_file(dir / (std::to_string(node) + ".err")); }
  Ended wait_for_both(Child& node0, Child& node1) const {
    Ended ended;
    ended.status1 = node1.wait_for(30s);
    ended.status0 = node0.wait_for(30s);
    ended.out0 = read_file(out(0));
    ended.errors = err_text(0) + err_text(1);
    return ended;
  }
  // Node 1 started, with `extra` arguments, once node 0 runs; then both waited for.
  Ended finish(Child& node0, std::vector<std::string> extra) const {
    Child node1 = start(1, argv(1, std::move(extra)));
    return wait_for_both(node0, node1);
  }

  TempDir dir;
  const std::string port = std::to_string(dtlaunch::launch::find_free_port());
};

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("doctor: two local launchers (--nnodes 2) check the job and both exit 0", "[doctor]") {
  const TwoLaunchers job;
  Child node1 = job.start(1, job.argv(1, {"--format", "json", "/bin/true"}));
  Child node0 = job.start(0, job.argv(0, {"--format", "json", "/bin/true"}));
  const auto ended = job.wait_for_both(node0, node1);
  INFO(ended.out0 << ended.errors);
  CHECK(ended.status0 == 0);
  CHECK(ended.status1 == 0);
  CHECK(ended.out0.rfind("{\"ok\": true, \"ranks\": [", 0) == 0);
  CHECK(count_of(ended.out0, "\"world_size\": 4") == 4);
  CHECK(ended.out0.find("\"problems\": []") != std::string::npos);
  CHECK(read_file(job.out(1)).empty());  // only rank 0 prints the report
}

TEST_CASE("doctor: a launcher that never comes is named, and the check ends at its timeout",
          "[doctor]") {
  TempDir dir;
  const std::string port = std::to_string(dtlaunch::launch::find_free_port());
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
  const std::string port = std::to_string(dtlaunch::launch::find_free_port());
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
  const std::string port = std::to_string(dtlaunch::launch::find_free_port());
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

namespace {

// A TCP connection to 127.0.0.1:port, or -1.
int connect_to(const std::string& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  ::close(fd);
  return -1;
}

// One report frame as the doctor's wire carries it (exchange.cpp): a 4-byte big-endian length,
// the magic line, "key=value" lines.
std::string report_frame(const std::string& body) {
  const std::string payload = "DTLAUNCH-DOCTOR 1 report\n" + body;
  const auto n = static_cast<std::uint32_t>(payload.size());
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)} +
         payload;
}

// VmHWM of a process, in kB (0 when gone).
long peak_kb(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("VmHWM:");
  return at == std::string::npos ? 0 : std::stol(status.substr(at + 6));
}

// argv run under `ulimit -n N`.
std::vector<std::string> with_fd_limit(int n, std::vector<std::string> argv) {
  argv.insert(argv.begin(),
              {"/bin/sh", "-c", "ulimit -n " + std::to_string(n) + " && exec \"$@\"", "sh"});
  return argv;
}

}  // namespace

TEST_CASE("doctor: 300 connections closing at once leave rank 0 no descriptor short", "[doctor]") {
  const TwoLaunchers job;
  const std::string& port = job.port;
  Child node0 = job.start(0, with_fd_limit(128, job.argv(0, {"--timeout", "20", "/bin/true"})));
  int first = -1;
  REQUIRE(eventually([&] { return (first = connect_to(port)) >= 0; }));
  std::vector<int> flood{first};
  for (int i = 0; i < 299; ++i) flood.push_back(connect_to(port));
  for (int fd : flood) ::close(fd);
  std::this_thread::sleep_for(500ms);
  const auto ended = job.finish(node0, {"--timeout", "20", "/bin/true"});
  INFO(ended.out0 << ended.errors);
  CHECK(ended.status0 == 0);
  CHECK(ended.status1 == 0);
  CHECK(ended.out0.find("ERROR") == std::string::npos);  // no missing rank: the verdict is right
}

TEST_CASE("doctor: one connection that floods rank 0 with valid reports is cut off, memory bounded",
          "[doctor]") {
  const TwoLaunchers job;
  const std::string& port = job.port;
  Child node0 = job.start(0, job.argv(0, {"--timeout", "20", "--format", "json", "/bin/true"}));
  int fd = -1;
  REQUIRE(eventually([&] { return (fd = connect_to(port)) >= 0; }));
  std::string body = "host=" + std::string(60000, 'x') + "\nmemlock_bytes=unlimited\n";
  for (const char* key :
       {"rank", "local_rank", "node_rank", "world_size", "nnodes", "master_port",
        "gpu_sharing_allowed", "gpu_isolated_by_slurm", "gpus_on_node", "cpus_far_from_gpu",
        "shm_bytes", "infiniband_devices", "program_size", "launcher_size", "sent_unix_ms"})
    body += std::string(key) + "=" + (std::string(key) == "rank" ? "2" : "0") + "\n";
  const std::string frame = report_frame(body);
  int sent = 0;
  for (; sent < 2000; ++sent) {
    std::string_view rest = frame;
    while (!rest.empty()) {
      const ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
    if (!rest.empty()) break;  // rank 0 closed the connection
  }
  ::close(fd);
  const long peak = peak_kb(node0.pid());
  const auto ended = job.finish(node0, {"--timeout", "20", "/bin/true"});
  INFO(ended.out0 << ended.errors << "frames sent: " << sent << ", peak " << peak << " kB");
  CHECK(sent < 2000);       // cut off, not read to the end (2000 x 60 KB = 120 MB)
  CHECK(peak < 64 * 1024);  // kB
  CHECK(ended.status1 == ended.status0);
  CHECK(ended.out0.find("\"kind\": \"bad-peer\"") != std::string::npos);
  CHECK(ended.out0.find("rank 0 cut off or turned away 1 connection to port " + port +
                        " that broke the doctor's protocol or its bounds (the first from "
                        "::ffff:127.0.0.1: more than ") != std::string::npos);
}

TEST_CASE(
    "doctor: a program that the launch could not execute fails the check with the launch's "
    "own line",
    "[doctor]") {
  TempDir dir;
  const std::string program = dir / "program";
  std::string says;
  SECTION("a missing #! interpreter") {
    std::ofstream(program) << "#!/nonexistent/python9\nprint('hi')\n";
    says = program +
           ": cannot execute: /nonexistent/python9: bad interpreter: No such file or "
           "directory";
  }
  SECTION("an empty executable file") {
    std::ofstream{program};
    says = program + ": cannot execute: Exec format error";
  }
  std::filesystem::permissions(program, std::filesystem::perms::owner_all);
  // What the launch itself says, for comparison.
  const Ran launch = run_program({kDtlaunch, "--nproc-per-node", "1", program}, dir);
  INFO(launch.err);
  CHECK(launch.status == 126);
  CHECK(launch.err.find(says) != std::string::npos);
  const std::string port = std::to_string(dtlaunch::launch::find_free_port());
  const Ran ran = run_program(
      {kDtlaunch, "doctor", "--nproc-per-node", "2", "--master-port", port, program}, dir);
  INFO(ran.out << ran.err);
  CHECK(ran.status == 3);
  CHECK(ran.out.find("ERROR program-cannot-execute: " + says + " (on ") != std::string::npos);
  CHECK(ran.out.find("OK: no problem found") == std::string::npos);
}

TEST_CASE("doctor: a port rank 0 may not listen on is named as such, not as a port in use",
          "[doctor]") {
  TempDir dir;
  // As an unprivileged user (nobody), port 80 is below net.ipv4.ip_unprivileged_port_start.
  const Ran ran = run_program(
      {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", kDtlaunch, "doctor",
       "--nproc-per-node", "1", "--master-port", "80", "/bin/true"},
      dir);
  INFO(ran.out << ran.err);
  CHECK(ran.status == 3);
  CHECK(ran.out.find("port-in-use") == std::string::npos);
  CHECK(ran.out.find("ERROR port-not-permitted: rank 0 may not listen on port 80 of ") !=
        std::string::npos);
  CHECK(ran.out.find("Permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE") !=
        std::string::npos);
}

TEST_CASE("doctor: rank 0's own reports show no clock skew however long probing took", "[doctor]") {
  // Probing (hashing the program, resolving names, reading the topology) takes seconds on a
  // loaded node: the skew is measured when a report arrives, and rank 0's own arrive at once.
  dtlaunch::doctor::TaskReport own;
  own.contract.rank = 0;
  own.contract.world_size = 1;
  own.contract.nnodes = 1;
  own.network.host = "here";
  own.clock.sent_unix_ms = dtlaunch::doctor::unix_ms() - 5000;  // probed 5 s ago
  const auto verdict = dtlaunch::doctor::serve(
      dtlaunch::doctor::local_expectation(1, 1), {own}, dtlaunch::launch::find_free_port(),
      dtlaunch::doctor::Clock::now() + std::chrono::seconds(5));
  REQUIRE(verdict.reports.size() == 1);
  CHECK(std::none_of(verdict.problems.begin(), verdict.problems.end(),
                     [](const auto& p) { return p.kind == "clock-skew"; }));
}

TEST_CASE("doctor: each report holds the contract its worker is told, and what its program sees",
          "[doctor]") {
  dtlaunch::launch::LaunchOptions options;
  options.argv = {"/bin/true"};
  options.nproc_per_node = 2;
  options.gpu_bind = dtlaunch::launch::GpuBind::kIsolate;
  const dtlaunch::core::EnvMap env{
      {"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", "3,5"}, {"OMP_NUM_THREADS", "4"}};
  const dtlaunch::launch::LaunchPlan launch =
      dtlaunch::launch::plan(options, env, dtlaunch::launch::LiveSystem());
  const std::vector<dtlaunch::doctor::TaskReport> reports = dtlaunch::doctor::plan_reports(launch);
  REQUIRE(reports.size() == 2);
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const dtlaunch::doctor::TaskReport& r = reports[rank];
    // The attempt's key is in what the worker is told (the wire leaves it out: report.cpp).
    REQUIRE(launch.workers[rank].contract.job_key);
    CHECK(r.contract == dtlaunch::launch::worker_contract(
                            launch.spec, {rank, rank, 0, launch.workers[rank].contract.job_key}));
    CHECK(r.contract.rank == rank);
    CHECK(r.placement.bound_device == (rank == 0 ? "3" : "5"));
    CHECK(r.placement.visible_devices ==
          r.placement.bound_device);                   // --gpu-bind=isolate narrowed the list
    CHECK(r.placement.omp_num_threads == "4");         // the user's, which the contract leaves
    CHECK(r.network.host == reports[0].network.host);  // the node probed once, shared
  }
  // The node's software by local rank 0 only.
  CHECK(reports[0].software.node_software);
  CHECK_FALSE(reports[1].software.node_software);
}
