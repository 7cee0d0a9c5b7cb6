// The built dtlaunch binary as a user runs it: crafted Slurm environments in, a child that
// prints its environment out (tests/bin/printenv_child).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../support/arg_max.hpp"
#include "../unit/slurm_env.hpp"
#include "dtlaunch_catch.hpp"
#include "run_process.hpp"

using dtlaunch::core::EnvMap;
using namespace dtlaunch_test;

namespace {

const std::string kDtlaunch = DTLAUNCH_BIN;
const std::string kChild = PRINTENV_CHILD;

ProcessResult launch(const EnvMap& env, std::vector<std::string> args) {
  args.insert(args.begin(), kDtlaunch);
  return run_process(args, env);
}

// The variables printenv_child printed, run by dtlaunch under Slurm (no rank prefix).
ChildValues printed_env(const std::string& out) {
  return child_values_by_rank(out)[0];
}

// Bad input: exactly one line on stderr naming the problem, the expected status, and the
// child never ran (it would have printed PID=).
void check_refused(const ProcessResult& r, int status, const std::string& needle) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_status == status);
  CHECK(r.out.find("PID=") == std::string::npos);
  CHECK(r.err.rfind("dtlaunch: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(r.err.size() < 600);  // a value of any size is quoted as a short excerpt
}

}  // namespace

TEST_CASE("blackbox: under an srun step dtlaunch execs the program with the contract") {
  for (int rank = 0; rank < 6; ++rank) {
    ProcessResult r = launch(slurm_step_env(rank, rank % 2, rank / 2), {kChild, "a b", "--flag"});
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_status == 0);
    CHECK(r.err.empty());
    auto vars = printed_env(r.out);
    // exec, not fork: the program has dtlaunch's own pid.
    CHECK(vars["PID"] == std::to_string(r.pid));
    CHECK(vars["ARGV[0]"] == kChild);
    CHECK(vars["ARGV[1]"] == "a b");
    CHECK(vars["ARGV[2]"] == "--flag");
    CHECK(vars["RANK"] == std::to_string(rank));
    CHECK(vars["LOCAL_RANK"] == std::to_string(rank % 2));
    CHECK(vars["WORLD_SIZE"] == "6");
    CHECK(vars["LOCAL_WORLD_SIZE"] == "2");
    CHECK(vars["NODE_RANK"] == std::to_string(rank / 2));
    CHECK(vars["GROUP_RANK"] == std::to_string(rank / 2));
    CHECK(vars["NNODES"] == "3");
    CHECK(vars["MASTER_ADDR"] == "node1");
    CHECK(vars["MASTER_PORT"].size() == 5);
    CHECK(vars["ROLE_NAME"] == "default");
    CHECK(vars["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(vars["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(vars["OMP_NUM_THREADS"] == "1");
    CHECK(vars["SLURM_JOB_ID"] == "4242");  // the rest of the environment passes through
    CHECK(vars.count("TORCHELASTIC_RUN_ID") == 0);
    CHECK(vars.count("TORCHELASTIC_USE_AGENT_STORE") == 0);
  }
}

TEST_CASE("blackbox: --dry-run prints the exact changes and argv and runs nothing") {
  EnvMap env = slurm_step_env(5, 1, 2);
  env.set("MASTER_PORT", "29555");
  env.set("CUDA_VISIBLE_DEVICES", "2,3");
  ProcessResult r = launch(env, {"--dry-run", kChild, "x'y"});
  REQUIRE(r.exit_status == 0);
  CHECK(r.out ==
        "export RANK='5'\nexport LOCAL_RANK='1'\nexport WORLD_SIZE='6'\n"
        "export LOCAL_WORLD_SIZE='2'\nexport GROUP_RANK='2'\nexport GROUP_WORLD_SIZE='3'\n"
        "export ROLE_RANK='5'\nexport ROLE_WORLD_SIZE='6'\nexport ROLE_NAME='default'\n"
        "export NODE_RANK='2'\nexport NNODES='3'\nexport MASTER_ADDR='node1'\n"
        "export MASTER_PORT='29555'\nexport TORCHELASTIC_RESTART_COUNT='0'\n"
        "export TORCHELASTIC_MAX_RESTARTS='0'\nexport DTLAUNCH_RUN_ID='slurm-4242.0'\n"
        "export TORCH_NCCL_ASYNC_ERROR_HANDLING='1'\n"
        "export OMP_NUM_THREADS='1'\nexport DTLAUNCH_CUDA_DEVICE='1'\n"
        "exec '" +
            kChild + "' 'x'\\''y'\n");

  r = launch(env, {"--dry-run", "--format", "json", "--gpu-bind", "isolate", kChild});
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("\"CUDA_VISIBLE_DEVICES\": \"3\"") != std::string::npos);
  CHECK(r.out.find("\"DTLAUNCH_CUDA_DEVICE\": \"0\"") != std::string::npos);
  CHECK(r.out.rfind("{\"argv\": [\"" + kChild + "\"]", 0) == 0);
}

TEST_CASE("blackbox: -v logs each decision on stderr, prefixed with the rank") {
  ProcessResult r = launch(slurm_step_env(0, 0, 0), {"-v", "--dry-run", kChild});
  REQUIRE(r.exit_status == 0);
  std::istringstream lines(r.err);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    CHECK(line.rfind("dtlaunch[rank 0] ", 0) == 0);
  }
  CHECK(count >= 3);
  CHECK(r.err.find("MASTER_ADDR=node1") != std::string::npos);
  CHECK(r.err.find("OMP_NUM_THREADS=1") != std::string::npos);
  // Rank 1 does not repeat the job-wide decisions.
  r = launch(slurm_step_env(1, 1, 0), {"-v", "--dry-run", kChild});
  CHECK(r.err.find("MASTER_ADDR") == std::string::npos);
}

TEST_CASE("blackbox: each bad input is one line, a distinct status, and nothing runs") {
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> set;
    std::vector<std::string> unset;
    std::vector<std::string> args;
    int status;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"rank past world", {{"SLURM_PROCID", "6"}}, {}, {}, 2, "SLURM_PROCID=6 is not below"},
      {"local id past node", {{"SLURM_LOCALID", "5"}}, {}, {}, 2, "SLURM_LOCALID=5"},
      {"hosts vs nodes", {{"SLURM_STEP_NODELIST", "node[1-4]"}}, {}, {}, 2, "has 4 host(s)"},
      {"sum vs world", {{"SLURM_STEP_TASKS_PER_NODE", "2,2,1"}}, {}, {}, 2, "adds up to 5"},
      {"bad hostlist", {{"SLURM_STEP_NODELIST", "node[1-3"}}, {}, {}, 2, "SLURM_STEP_NODELIST: "},
      {"bad tasks per node",
       {{"SLURM_STEP_TASKS_PER_NODE", "2(x)"}},
       {},
       {},
       2,
       "SLURM_STEP_TASKS_PER_NODE='2(x)'"},
      {"missing rank", {}, {"SLURM_PROCID"}, {}, 2, "SLURM_PROCID is not set"},
      {"bad user port", {{"MASTER_PORT", "0"}}, {}, {}, 2, "MASTER_PORT='0'"},
      {"too few GPUs",
       {{"CUDA_VISIBLE_DEVICES", "0"}},
       {},
       {},
       2,
       "1 GPU(s) (CUDA_VISIBLE_DEVICES='0') for 2 ranks on this node: ask Slurm"},
      {"too few GPUs once narrowed",
       {{"CUDA_VISIBLE_DEVICES", "3,5"}},
       {},
       {"--gpus-per-node", "1"},
       2,
       "1 GPU(s) (CUDA_VISIBLE_DEVICES='3,5' narrowed by --gpus-per-node=1) for 2 ranks"},
      {"GPU list CUDA cannot read",
       {{"CUDA_VISIBLE_DEVICES", "a,b"}},
       {},
       {},
       2,
       "CUDA_VISIBLE_DEVICES='a,b': entry 'a' is not a device index"},
      {"hostfile that never ends",
       {{"SLURM_DISTRIBUTION", "arbitrary"}, {"SLURM_HOSTFILE", "/dev/zero"}},
       {},
       {},
       2,
       "SLURM_HOSTFILE='/dev/zero': no host in its first 64 KiB"},
      {"huge rank value",
       {{"SLURM_PROCID", std::string(120000, '7')}},
       {},
       {},
       2,
       "SLURM_PROCID='77777777777777777777"},
      {"binary rank value", {{"SLURM_PROCID", "1\x1b[2J\xff"}}, {}, {}, 2, "'1\\x1b[2J\\xff'"},
      {"GPUs per task without a count",
       {{"SLURMD_TRES_BIND", "gpu:per_task:"}},
       {},
       {},
       2,
       "SLURMD_TRES_BIND='gpu:per_task:'"},
      {"batch script of one task",
       {{"SLURM_NTASKS", "1"}},
       {"SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS"},
       {},
       2,
       "'dtlaunch --nproc-per-node 1 PROGRAM'"},
      {"host name from a bad node list",
       {{"SLURM_STEP_NODELIST", "n[[1-3]]"}},
       {},
       {},
       2,
       "MASTER_ADDR derived from the step's node list='n[1]': '[' cannot be part"},
      {"control characters in --master-addr",
       {},
       {},
       {"--master-addr", "host\nname"},
       2,
       "--master-addr='host\\nname'"},
      {"blank in MASTER_ADDR", {{"MASTER_ADDR", "a b"}}, {}, {}, 2, "MASTER_ADDR='a b'"},
      {"port out of range",
       {},
       {},
       {"--master-port", "99999999999999999999"},
       2,
       "--master-port='99999999999999999999': expected an integer in 1..65535"},
      {"empty port option", {}, {}, {"--master-port", ""}, 2, "--master-port=''"},
      {"batch script without srun",
       {},
       {"SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS"},
       {},
       2,
       "outside an srun step"},
      {"unknown option", {}, {}, {"--bogus"}, 2, "--bogus"},
      {"bad gpu-bind",
       {},
       {},
       {"--gpu-bind", "all"},
       2,
       "--gpu-bind='all': expected one of share, isolate, none"},
      {"control characters in --cpu-bind",
       {},
       {},
       {"--cpu-bind", "numa\x01"},
       2,
       "--cpu-bind='numa\\x01': expected one of none, numa, socket, exclusive, cache"},
      {"negative nproc", {}, {}, {"--nproc-per-node", "-1"}, 2, "--nproc-per-node='-1'"},
      {"huge grace", {}, {}, {"--grace", "1e300"}, 2, "--grace='1e300': expected seconds"},
      {"nproc inside a multi-task step", {}, {}, {"--nproc-per-node", "4"}, 2, "would start 24"},
      {"mode slurm with nproc",
       {},
       {},
       {"--mode", "slurm", "--nproc-per-node", "2"},
       2,
       "contradict"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    EnvMap env = slurm_step_env(1, 1, 0);
    for (const auto& [k, v] : c.set) env.set(k, v);
    for (const auto& k : c.unset) env.erase(k);
    std::vector<std::string> args = c.args;
    args.push_back(kChild);
    check_refused(launch(env, args), c.status, c.needle);
  }
}

// Issue 36: a bad word for a choice option read as CLI11's own check ("Check bogus value in
// {chrome->2,json->1,text->0} ... FAILED") where the other choices name the words they take.
TEST_CASE("blackbox: every choice option refuses a bad word with the words it takes") {
  const struct {
    std::vector<std::string> args;
    std::string needle;
  } cases[] = {
      {{"--format", "bogus"}, "--format='bogus': expected one of shell, json"},
      {{"--mode", "bogus"}, "--mode='bogus': expected one of auto, slurm, local"},
      {{"--mem-bind", "bogus"}, "--mem-bind='bogus': expected one of "},
      {{"doctor", "--format", "bogus"}, "--format='bogus': expected one of table, json"},
      {{"doctor", "--gpu-bind", "bogus"}, "--gpu-bind='bogus': expected one of share, isolate"},
      {{"job", "--format", "bogus"}, "--format='bogus': expected one of table, json"},
      {{"trace", "/tmp", "--format", "bogus"},
       "--format='bogus': expected one of text, json, chrome"},
      {{"trace", "--format", "x\x1b[2J", "/tmp"}, "--format='x\\x1b[2J': expected one of"},
  };
  for (const auto& c : cases) {
    INFO(c.args.front() << " " << c.args.back());
    check_refused(launch(slurm_step_env(), c.args), 2, c.needle);
  }
}

TEST_CASE("blackbox: a program that is missing or not executable gets 127 / 126") {
  check_refused(launch(slurm_step_env(), {"no-such-program-xyz"}), 127,
                "no-such-program-xyz: command not found in PATH");
  char plain[] = "/tmp/dtlaunch-test-plain-XXXXXX";
  int fd = ::mkstemp(plain);
  REQUIRE(fd >= 0);
  ::fchmod(fd, 0644);
  ::close(fd);
  check_refused(launch(slurm_step_env(), {plain}), 126,
                std::string(plain) + ": cannot execute: Permission denied");
  ::unlink(plain);
  check_refused(launch(slurm_step_env(), {}), 2, "no program given");
}

// The exec failures only execve itself finds, with the same statuses and lines as local mode
// (tests/proc/supervisor_test.cpp has the same cases there).
TEST_CASE("blackbox: under Slurm, a missing #! interpreter and E2BIG give 126, as a shell") {
  char script[] = "/tmp/dtlaunch-test-interp-XXXXXX";
  const int fd = ::mkstemp(script);
  REQUIRE(fd >= 0);
  const std::string text = "#!/nonexistent/interpreter\nexit 0\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::fchmod(fd, 0755);
  ::close(fd);
  check_refused(launch(slurm_step_env(), {script}), 126,
                std::string(script) +
                    ": cannot execute: /nonexistent/interpreter: bad interpreter: No such file "
                    "or directory");
  ::unlink(script);

  // dtlaunch's own execve fits with 16 bytes to spare; the program's adds the launch variables.
  const EnvMap env = slurm_step_env();
  const std::vector<std::string> args = {kDtlaunch, "/bin/true"};
  const std::string pad = dtlaunch_test::arg_max_padding(kDtlaunch, args, env.to_strings(), 16);
  check_refused(
      run_process({"/usr/bin/prlimit", dtlaunch_test::kSmallStack, kDtlaunch, "/bin/true", pad},
                  env),
      126, "/bin/true: cannot execute: Argument list too long");
}

TEST_CASE("blackbox: outside Slurm without --nproc-per-node the error says what to do") {
  check_refused(launch(EnvMap{{"PATH", "/usr/bin:/bin"}}, {kChild}), 2, "not inside a Slurm step");
}

TEST_CASE("blackbox: --help and --version exit 0") {
  ProcessResult r = launch(EnvMap{}, {"--help"});
  CHECK(r.exit_status == 0);
  CHECK(r.out.find("--nproc-per-node") != std::string::npos);
  CHECK(r.out.find("Examples:") != std::string::npos);
  r = launch(EnvMap{}, {"--version"});
  CHECK(r.exit_status == 0);
  CHECK(r.out.rfind("dtlaunch ", 0) == 0);
}

namespace {

std::string page_text(const char* path) {
  std::ifstream page(path);
  REQUIRE(page);
  std::stringstream text;
  text << page.rdbuf();
  return text.str();
}

// env-table's output as its blocks: the exported and removed variables, then one table of what
// is read per owner, each starting "Read by owner `OWNER`".
std::vector<std::string> env_table_blocks(const std::string& out) {
  const std::string marker = "\nRead by owner `";
  std::vector<std::string> blocks;
  std::size_t start = 0;
  for (std::size_t next; (next = out.find(marker, start + 1)) != std::string::npos; start = next)
    blocks.push_back(out.substr(start, next - start));
  blocks.push_back(out.substr(start));
  return blocks;
}

}  // namespace

TEST_CASE("blackbox: docs/environment.md and docs/ddp.md hold the tables the binary prints") {
  ProcessResult r = launch(EnvMap{}, {"env-table"});
  REQUIRE(r.exit_status == 0);
  const std::string environment = page_text(DOCS_ENVIRONMENT_PAGE);
  const std::string ddp = page_text(DOCS_DDP_PAGE);
  const std::vector<std::string> blocks = env_table_blocks(r.out);
  REQUIRE(blocks.size() == 5);  // exported and removed; launcher, doctor, runtime, example
  for (const std::string& block : blocks) {
    const bool runtime = block.starts_with("\nRead by owner `runtime`");
    INFO("regenerate with: build/apps/dtlaunch/dtlaunch env-table, and paste this block into "
         << (runtime ? DOCS_DDP_PAGE : DOCS_ENVIRONMENT_PAGE) << ":\n"
         << block);
    CHECK((runtime ? ddp : environment).find(block) != std::string::npos);
  }
}

TEST_CASE("blackbox: bad input in local mode and outside Slurm is refused with one line") {
  const EnvMap plain{{"PATH", "/usr/bin:/bin"}};
  check_refused(launch(plain, {"--port-range", "1-2", "--nproc-per-node", "1", kChild}), 2,
                "--port-range='1-2': need 1024 <= LO <= HI <= 65535");
  EnvMap with_range = plain;
  with_range.set("DTLAUNCH_PORT_RANGE", "9-x");
  check_refused(launch(with_range, {"--nproc-per-node", "1", kChild}), 2,
                "DTLAUNCH_PORT_RANGE='9-x'");
  EnvMap one_gpu = plain;
  one_gpu.set("CUDA_VISIBLE_DEVICES", "0");
  check_refused(launch(one_gpu, {"--nproc-per-node", "2", kChild}), 2,
                "1 GPU(s) (CUDA_VISIBLE_DEVICES='0') for 2 ranks on this node: pass "
                "--nproc-per-node 1 or fewer, or --allow-gpu-sharing");
  check_refused(launch(EnvMap{}, {"--mode", "slurm", kChild}), 2,
                "--mode slurm, but this is not a Slurm job");
}

TEST_CASE("blackbox: an empty variable counts as unset") {
  EnvMap env = slurm_step_env(1, 1, 0);
  env.set("OMP_NUM_THREADS", "");
  env.set("MASTER_PORT", "");
  env.set("MASTER_ADDR", "");
  ProcessResult r = launch(env, {kChild});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_status == 0);
  auto vars = printed_env(r.out);
  CHECK(vars["OMP_NUM_THREADS"] == "1");  // not "", which OpenMP reads as "every core"
  CHECK(vars["MASTER_ADDR"] == "node1");
  CHECK(vars["MASTER_PORT"] ==
        printed_env(launch(slurm_step_env(1, 1, 0), {kChild}).out)["MASTER_PORT"]);
  // CUDA_VISIBLE_DEVICES is the exception: CUDA reads an empty list as "no device".
  env = slurm_step_env(1, 1, 0);
  env.set("CUDA_VISIBLE_DEVICES", "");
  r = launch(env, {kChild});
  REQUIRE(r.exit_status == 0);
  CHECK(printed_env(r.out).count("DTLAUNCH_CUDA_DEVICE") == 0);
}

TEST_CASE("blackbox: --dry-run --format json escapes bytes that are not UTF-8") {
  const std::string arg = "caf\xc3\xa9 \xff\xfe x";
  ProcessResult r = launch(slurm_step_env(), {"--dry-run", "--format", "json", kChild, arg});
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("\"caf\xc3\xa9 \\udcff\\udcfe x\"") != std::string::npos);
  for (char c : r.out) CHECK(c != '\xff');
}

TEST_CASE("blackbox: a hostfile of random bytes is named in a short error") {
  char path[] = "/tmp/dtlaunch-test-hostfile-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::string junk;
  for (int i = 0; i < 200000; ++i) junk.push_back(static_cast<char>((i * 7919 + 13) % 251 + 1));
  REQUIRE(::write(fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
  ::close(fd);
  EnvMap env = slurm_step_env();
  env.set("SLURM_DISTRIBUTION", "arbitrary");
  env.set("SLURM_HOSTFILE", path);
  check_refused(launch(env, {kChild}), 2, "SLURM_HOSTFILE='" + std::string(path) + "'");
  ::unlink(path);
}

TEST_CASE("blackbox: DTLAUNCH_RUN_ID names the run for the runtime's check-in") {
  auto run_id = [](const EnvMap& env, std::vector<std::string> args) {
    args.push_back(kChild);
    ProcessResult r = launch(env, args);
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_status == 0);
    // One worker: under Slurm the program itself, in local mode rank N, its lines "[rank N] ".
    const auto ranks = child_values_by_rank(r.out);
    REQUIRE(ranks.size() == 1);
    const ChildValues& vars = ranks.begin()->second;
    const auto id = vars.find("DTLAUNCH_RUN_ID");
    return id == vars.end() ? std::string("<unset>") : id->second;
  };
  CHECK(run_id(slurm_step_env(3, 1, 1), {}) == "slurm-4242.0");
  EnvMap het = slurm_step_env();
  het.set("SLURM_HET_JOB_OFFSET", "1");
  CHECK(run_id(het, {}) == "slurm-4242.0+1");
  const EnvMap plain{{"PATH", "/usr/bin:/bin"}, {"DTLAUNCH_RUN_ID", "outer"}};
  const std::string standalone = run_id(plain, {"--nproc-per-node", "1"});
  CHECK(standalone.rfind("local-", 0) == 0);
  CHECK(standalone != run_id(plain, {"--nproc-per-node", "1"}));  // every launch its own
  const std::vector<std::string> two_nodes = {"--nnodes",         "2",  "--node-rank",   "1",
                                              "--master-addr",    "h0", "--master-port", "29500",
                                              "--nproc-per-node", "1"};
  std::vector<std::string> named = two_nodes;
  named.insert(named.end(), {"--run-id", "exp7"});
  CHECK(run_id(plain, named) == "local-exp7");
  CHECK(run_id(plain, two_nodes) == "<unset>");  // and the outer launch's value is removed
  // Issue 26 item 22: a --run-id that is not short printable ASCII is refused, naming it.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"exp\n7", "--run-id 'exp\\n7' has a control character at byte 4"},
      {"exp\x1b[2J", "--run-id 'exp\\x1b[2J' has a control character at byte 4"},
      {std::string(100000, 'r'), " (100000 bytes)' is 100000 bytes long; at most 128"},
      {"", "--run-id '' is empty"}};
  for (const auto& [id, why] : bad) {
    std::vector<std::string> args = two_nodes;
    args.insert(args.end(), {"--run-id", id, kChild});
    check_refused(launch(plain, args), 2, why);
  }
}

TEST_CASE("blackbox: hostnames --help and hostlist --help show the subcommand's own examples") {
  const EnvMap env{{"PATH", "/usr/bin:/bin"}};
  for (const std::string name : {"hostnames", "hostlist"}) {
    const ProcessResult r = launch(env, {name, "--help"});
    INFO(r.out);
    CHECK(r.exit_status == 0);
    CHECK(r.out.find("dtlaunch " + name + " [--] ") != std::string::npos);
    CHECK(r.out.find("Examples:\n  dtlaunch " + name + " ") != std::string::npos);
    CHECK(r.out.find("srun") == std::string::npos);  // not the launcher's examples
  }
}

TEST_CASE("blackbox: subcommands take arguments verbatim, and are subcommands only first") {
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string out;  // stdout, or a part of stderr when the status is not 0
  };
  const EnvMap env{{"PATH", "/usr/bin:/bin"}};
  const std::vector<Case> cases = {
      // Arguments that look like CLI11's vector syntax or an option reach the hostlist parser.
      {{"hostnames", "[1-3]"}, 0, "1\n2\n3\n"},
      {{"hostnames", "[1-2],[5-6]"}, 0, "1\n2\n5\n6\n"},
      {{"hostnames", "-n1"}, 0, "-n1\n"},
      {{"hostlist", "[1-3]"}, 0, "[1-3]\n"},
      {{"hostlist", "n1", "n2", "n3"}, 0, "n[1-3]\n"},
      {{"env-table", "[x]"}, 2, "env-table takes no arguments, got '[x]'"},
      {{"hostnames"}, 2, "no hostlist expression given"},
      // Issue 26 item 3: a first "--" ends the options, as in scontrol; the rest is verbatim.
      {{"hostnames", "--", "[1-3]"}, 0, "1\n2\n3\n"},
      {{"hostnames", "--", "-n1", "--"}, 0, "-n1\n--\n"},
      {{"hostlist", "--", "n1", "n2", "n3"}, 0, "n[1-3]\n"},
      {{"hostnames", "--"}, 2, "no hostlist expression given"},
      {{"hostlist", "--"}, 2, "no host name given"},
      // Elsewhere the word is the program's name: no such program here.
      {{"--nproc-per-node", "1", "--", "hostnames", "[1-3]"}, 127, "hostnames"},
      {{"--nproc-per-node", "1", "hostlist", "x"}, 127, "hostlist"},
      // The doctor's program, after "--" or not, is resolved before any check starts.
      {{"doctor", "--nproc-per-node", "1", "--", "no-such-program"}, 127, "no-such-program"},
      {{"doctor", "--nproc-per-node", "1", "no-such-program"}, 127, "no-such-program"},
  };
  for (const Case& c : cases) {
    INFO(c.args.front() << " " << c.args.back());
    const ProcessResult r = launch(env, c.args);
    CHECK(r.exit_status == c.status);
    if (c.status == 0)
      CHECK(r.out == c.out);
    else
      check_refused(r, c.status, c.out);
  }
}

// Issue 32: `dtlaunch job --live`'s store program is found before the first attempt starts; one
// that is missing or cannot run is bad input naming the option.
TEST_CASE("blackbox: dtlaunch job --live refuses a --store-program that cannot run") {
  const EnvMap batch{{"SLURM_JOB_ID", "4242"},
                     {"SLURM_JOB_NODELIST", "node[1-4]"},
                     {"SLURM_TASKS_PER_NODE", "2(x4)"},
                     {"SLURM_NTASKS", "8"},
                     {"PATH", "/usr/bin:/bin"}};
  const std::pair<std::string, std::string> cases[] = {
      {"/no/such/store", "--store-program: /no/such/store: no such file"},
      {"/tmp", "--store-program: /tmp: cannot execute: Is a directory"},
      {"no-such-store-xyz", "--store-program: no-such-store-xyz: command not found in PATH"},
      {"", "--store-program: program name is empty"}};
  for (const auto& [program, needle] : cases) {
    INFO("--store-program '" << program << "'");
    check_refused(launch(batch, {"job", "--live", "--spare-nodes", "1", "--store-program", program,
                                 "--", kChild}),
                  2, needle);
  }
}

// Issue 35: `dtlaunch job --no-retry-exit` names the part of its value that is not a status.
TEST_CASE("blackbox: dtlaunch job --no-retry-exit refuses what is not a list of exit statuses") {
  check_refused(launch(slurm_step_env(), {"job", "--no-retry-exit", "3,x", "--", kChild}), 2,
                "--no-retry-exit='3,x': 'x' is not an exit status");
  check_refused(launch(slurm_step_env(), {"job", "--no-retry-exit", "0", "--", kChild}), 2,
                "expected statuses in 1..255");
}
