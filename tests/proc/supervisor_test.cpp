// run_workers with real processes and real signals, through proc_driver. Every run checks that
// nothing of the driver's tree is left (run_driver: the test is a child subreaper).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "../support/arg_max.hpp"
#include "dtlaunch_catch.hpp"
#include "harness.hpp"

extern char** environ;

using namespace proctest;
using namespace std::chrono_literals;

namespace {

const std::string kHelper = PROC_HELPER;

// sh -c SCRIPT, with $H the helper program.
std::vector<std::string> sh(const std::string& script) {
  return {"/bin/sh", "-c", "H=" + kHelper + "; " + script};
}

// Every rank but `failing` ignores SIGTERM; `failing` exits with `code` once all the others
// have said they ignore it (in a file named after the run's MASTER_PORT, a free port the
// driver found: one per run, shared by its workers; one line per ready rank).
std::string wait_then_fail(int failing, int code) {
  return "READY=${TMPDIR:-/tmp}/dtlaunch-proc-ready.$MASTER_PORT; "
         "[ $RANK = " +
         std::to_string(failing) +
         " ] || exec $H ignore-term 30 $READY; "
         "while [ \"$(cat $READY 2>/dev/null | wc -l)\" -lt $((WORLD_SIZE - 1)) ]; do sleep 0.02; "
         "done; rm -f $READY; exit " +
         std::to_string(code);
}

// Every test runs the library's own harness and, when it is built, the real launcher: both
// take the same options.
std::vector<std::string> launchers() {
#ifdef DTLAUNCH
  return {PROC_DRIVER, DTLAUNCH};
#else
  return {PROC_DRIVER};
#endif
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The fixture of the tests below: each runs once per launcher, which every failure names, with a
// scratch directory, as the subreaper of everything the launcher starts; when it ends, all of
// that must have exited.
class LauncherRun {
 public:
  LauncherRun() { become_subreaper(); }
  ~LauncherRun() { check_all_exited(); }
  LauncherRun(const LauncherRun&) = delete;
  LauncherRun& operator=(const LauncherRun&) = delete;

 protected:
  // Reaps what comes back to this subreaper test process; anything still alive after 5 s is
  // named and fails the test.
  static void check_all_exited() {
    const std::vector<pid_t> alive = settle(5s);
    for (pid_t pid : alive) UNSCOPED_INFO("still alive: " << pid << " " << process_name(pid));
    CHECK(alive.empty());
  }
  // The launcher with `args`, run to its end (run_program: nothing of its tree may be left).
  Ran run(const std::vector<std::string>& args) const {
    return run_program(concat({launcher}, args), dir);
  }
  // The launcher with `args` started, to be signalled: stdout in dir/out, stderr in dir/err;
  // `ignored`: signals it inherits ignored.
  Child start(const std::vector<std::string>& args, const std::vector<int>& ignored = {}) const {
    return start_writing_to(dir / "out", args, ignored);
  }
  Child start_writing_to(const std::string& stdout_path, const std::vector<std::string>& args,
                         const std::vector<int>& ignored = {}) const {
    return Child(concat({launcher}, args), stdout_path, dir / "err", ignored);
  }
  std::string out_text() const { return read_file(dir / "out"); }
  std::string err_text() const { return read_file(dir / "err"); }

  const std::string launcher = GENERATE(from_range(launchers()));
  const TempDir dir;

 private:
  // What INFO("launcher: " << launcher) in the test's body would be, for the whole test.
  const Catch::ScopedMessage launcher_named_{
      Catch::MessageBuilder("INFO", CATCH_INTERNAL_LINEINFO, Catch::ResultWas::Info)
      << "launcher: " << launcher};
};

}  // namespace

TEST_CASE_METHOD(LauncherRun, "exit status and failure report of a group", "[proc]") {
  struct Case {
    const char* name;
    std::vector<std::string> args;
    int status;
    const char* report;  // regex over the driver's stderr; "" = no failure report
    double max_seconds;
  };
  const std::vector<Case> cases = {
      {"all succeed", concat({"--nproc-per-node", "3", "--"}, sh("exit 0")), 0, "", 10},
      {"one exits 3, the others are stopped",
       concat({"--nproc-per-node", "3", "--grace", "20", "--"},
              sh("if [ $RANK = 1 ]; then echo loading; echo about to fail >&2; exit 3; fi; "
                 "sleep 30")),
       3,
       "dtlaunch: rank 1 failed \\(exit 3\\); sent SIGTERM to the 2 other workers still running, "
       "SIGKILL in 20 s\n(.|\n)*dtlaunch: rank 1 \\(local 1\\) on \\S+ failed: exit 3; its last 2 "
       "lines:\n"
       "  \\[rank 1\\] loading\n  \\[rank 1\\] about to fail\n",
       10},
      {"exit 75 is a stop to be resumed, not a failure, and is passed through",
       concat({"--nproc-per-node", "2", "--"},
              sh("if [ $RANK = 1 ]; then echo checkpoint saved; exit 75; fi; sleep 30")),
       75,
       "dtlaunch: rank 1 stopped to be resumed \\(exit 75\\); sent SIGTERM to the 1 other "
       "worker still running, SIGKILL in 30 s\n(.|\n)*dtlaunch: rank 1 \\(local 1\\) on \\S+ "
       "stopped to be resumed: exit 75 "
       "\\(EX_TEMPFAIL\\); its last line:\n  \\[rank 1\\] checkpoint saved\n",
       10},
      {"killed by SIGSEGV",
       concat({"--nproc-per-node", "2", "--"},
              sh("if [ $RANK = 0 ]; then exec $H raise SEGV; fi; sleep 30")),
       128 + SIGSEGV,
       "rank 0 \\(local 0\\) on \\S+ failed: killed by SIGSEGV; its last line:\n"
       "  \\[rank 0\\] R0 raising SEGV\n",
       10},
      {"killed by SIGKILL, wrote nothing",
       concat({"--nproc-per-node", "2", "--"},
              sh("if [ $RANK = 1 ]; then kill -KILL $$; fi; sleep 30")),
       128 + SIGKILL, "rank 1 \\(local 1\\) on \\S+ failed: killed by SIGKILL; it wrote nothing\n",
       10},
      {"workers ignoring SIGTERM get SIGKILL after the grace period",
       concat({"--nproc-per-node", "3", "--grace", "0.4", "--"}, sh(wait_then_fail(2, 1))), 1,
       "rank 2 \\(local 2\\) on \\S+ failed: exit 1; it wrote nothing\n", 10},
      {"exit 0 leaving grandchildren, one in a session of its own: killed, not waited for",
       concat({"--nproc-per-node", "2", "--"}, sh("sleep 300 & setsid sleep 300 & exit 0")), 0, "",
       10},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const Ran ran = run(c.args);
      INFO("stderr:\n" << ran.err);
      CHECK(ran.status == c.status);
      CHECK(ran.seconds < c.max_seconds);
      if (*c.report == '\0') {
        CHECK(ran.err.find("failed") == std::string::npos);
      } else {
        CHECK(std::regex_search(ran.err, std::regex(c.report)));
      }
    }
  }
}

TEST_CASE_METHOD(LauncherRun, "the grace period is waited before SIGKILL", "[proc]") {
  const Ran ran =
      run(concat({"--nproc-per-node", "2", "--grace", "0.7", "--"}, sh(wait_then_fail(1, 4))));
  CHECK(ran.status == 4);
  CHECK(ran.seconds >= 0.7);
  CHECK(ran.seconds < 5);
}

TEST_CASE_METHOD(LauncherRun, "a program that cannot be executed: 127 / 126, nothing left",
                 "[proc]") {
  const std::string not_executable = dir / "script";
  std::ofstream(not_executable) << "#!/bin/sh\nexit 0\n";
  ::chmod(not_executable.c_str(), 0644);
  struct Case {
    std::string program;
    int status;
    std::string message;
  };
  for (const Case& c : {Case{dir / "missing", 127, ": no such file"},
                        Case{not_executable, 126, ": cannot execute: Permission denied"}}) {
    const Ran ran = run({"--nproc-per-node", "3", "--", c.program});
    CHECK(ran.status == c.status);
    // The library's own exec failure path (the driver), or the launcher's check of the program
    // before anything starts: one line naming it, worded alike.
    CHECK(ran.err.find(c.program + c.message) != std::string::npos);
    if (launcher != PROC_DRIVER) CHECK(std::count(ran.err.begin(), ran.err.end(), '\n') == 1);
  }
}

// The exec failures only execve itself finds, worded and numbered as under Slurm
// (tests/blackbox/launcher_test.cpp has the same cases for the Slurm path).
TEST_CASE_METHOD(LauncherRun,
                 "exec failures: a missing #! interpreter and E2BIG give 126, as a shell",
                 "[proc]") {
  const std::string prefix = launcher == PROC_DRIVER ? "proc_driver: " : "dtlaunch: ";
  SECTION("#! names an interpreter that does not exist") {
    const std::string script = dir / "script";
    std::ofstream(script) << "#!/nonexistent/interpreter -x\nexit 0\n";
    ::chmod(script.c_str(), 0755);
    const Ran ran = run({"--nproc-per-node", "2", "--", script});
    CHECK(ran.status == 126);
    CHECK(ran.err.find(prefix + script +
                       ": cannot execute: /nonexistent/interpreter: bad interpreter: No such "
                       "file or directory\n") != std::string::npos);
  }
  SECTION("the worker's argv and environment are just over the kernel's limit") {
    // The launcher's own execve fits, with 16 bytes to spare; its worker's adds the launch
    // variables (hundreds of bytes) and loses only the launcher's name and options.
    const std::vector<std::string> args = {launcher, "--nproc-per-node", "1", "--", "/bin/true"};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    const std::string pad = dtlaunch_test::arg_max_padding(launcher, args, env, 16);
    const Ran ran = run_program(
        concat(concat({"/usr/bin/prlimit", dtlaunch_test::kSmallStack}, args), {pad}), dir);
    CHECK(ran.status == 126);
    CHECK(ran.err.find(prefix + "/bin/true: cannot execute: Argument list too long\n") !=
          std::string::npos);
  }
}

TEST_CASE_METHOD(LauncherRun,
                 "descendants of the workers are killed and reaped when the group ends", "[proc]") {
  const std::string pids = dir / "pids";
  for (const char* session : {"group", "setsid"}) {
    SECTION(session) {
      const Ran ran = run({"--nproc-per-node", "2", "--", kHelper, "tree", pids, session, "exit"});
      CHECK(ran.status == 0);
      CHECK(ran.seconds < 10);
      const std::vector<pid_t> grandchildren = read_pids(pids);
      REQUIRE(grandchildren.size() == 2);
      for (pid_t pid : grandchildren) CHECK_FALSE(exists(pid));
    }
  }
}

TEST_CASE_METHOD(LauncherRun, "SIGKILL of the supervisor kills the workers and their children",
                 "[proc]") {
  // group: the forked child stays in the worker's process group (the guardian's group kill);
  // setsid: it is in a session of its own (the guardian's sweep for DTLAUNCH_SUPERVISOR).
  const std::string session = GENERATE(as<std::string>{}, "group", "setsid");
  INFO("child: " << session);
  const std::string pids = dir / "pids";
  // Each worker: a shell's background command, and a forked child of the worker itself.
  Child driver = start({"--nproc-per-node", "3", "--", "/bin/sh", "-c",
                        "sleep 300 & echo $! >> " + pids + "; exec " + kHelper + " tree " + pids +
                            " " + session + " sleep"});
  REQUIRE(eventually([&] { return read_pids(pids).size() == 6; }));
  std::vector<pid_t> tree = read_pids(pids);
  for (pid_t pid : children_of(driver.pid()))
    if (process_name(pid) != "dtlaunch-guard") tree.push_back(pid);
  REQUIRE(tree.size() == 9);  // 3 workers, 6 descendants

  driver.signal(SIGKILL);
  CHECK(driver.wait_for(5s) == 128 + SIGKILL);
  // Workers die by PR_SET_PDEATHSIG, grandchildren by the guardian's kill of their groups or
  // its sweep; all of them come back to this subreaper test process, which reaps them.
  check_all_exited();
  for (pid_t pid : tree) CHECK_FALSE(exists(pid));
}

TEST_CASE_METHOD(LauncherRun, "signals to the supervisor reach every worker and its children, once",
                 "[proc]") {
  Child driver = start(
      {"--nproc-per-node", "2", "--grace", "10", "--", kHelper, "record", dir.path(), "child"});
  const std::vector<std::string> files = {dir / "rank0.txt", dir / "rank0.child.txt",
                                          dir / "rank1.txt", dir / "rank1.child.txt"};
  auto all_end_with = [&](const std::string& word) {
    return [&files, word] {
      for (const std::string& f : files) {
        const std::vector<std::string> lines = split_lines(read_file(f));
        if (lines.empty() || lines.back() != word) return false;
      }
      return true;
    };
  };
  REQUIRE(eventually(all_end_with("ready")));
  const std::vector<std::pair<int, std::string>> sent = {
      {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}, {SIGHUP, "HUP"}, {SIGINT, "INT"}};
  for (const auto& [sig, name] : sent) {
    driver.signal(sig);
    REQUIRE(eventually(all_end_with(name)));
  }
  driver.signal(SIGTERM);  // the recorders exit 0 on SIGTERM
  CHECK(driver.wait_for(10s) == 0);
  for (const std::string& f : files) CHECK(read_file(f) == "ready\nUSR1\nUSR2\nHUP\nINT\nTERM\n");
  const std::string err = err_text();
  CHECK(err.find("dtlaunch: got SIGHUP, passed it to the workers; SIGKILL in 10 s") !=
        std::string::npos);
}

TEST_CASE_METHOD(LauncherRun,
                 "SIGTERM to the supervisor: workers that ignore it are killed after the grace",
                 "[proc]") {
  Child driver =
      start({"--nproc-per-node", "2", "--grace", "0.3", "--", kHelper, "ignore-term", "30"});
  REQUIRE(eventually([&] {
    return out_text() == "[rank 0] ready\n[rank 1] ready\n" ||
           out_text() == "[rank 1] ready\n[rank 0] ready\n";
  }));
  driver.signal(SIGTERM);
  CHECK(driver.wait_for(10s) == 128 + SIGKILL);
  // 137 is the truth (SIGKILL ended them); the report says why it came.
  const std::string err = err_text();
  INFO(err);
  CHECK(err.find("dtlaunch: 2 workers still running 300 ms after SIGTERM: sent SIGKILL\n") !=
        std::string::npos);
  CHECK(std::regex_search(err, std::regex("rank [01] \\(local [01]\\) on \\S+ failed: killed by "
                                          "SIGKILL \\(from dtlaunch: still running 300 ms after "
                                          "SIGTERM\\); its last line:\n")));
}

TEST_CASE_METHOD(LauncherRun,
                 "heavy output: every line whole, prefixed, in order per rank and stream",
                 "[proc]") {
  constexpr int kRanks = 4, kLines = 20000, kLen = 80;
  const Ran ran = run({"--nproc-per-node", std::to_string(kRanks), "--", kHelper, "lines",
                       std::to_string(kLines), std::to_string(kLen)});
  REQUIRE(ran.status == 0);
  const std::regex line_re("\\[rank (\\d)\\] R(\\d) (\\d+) ([a-z]+)|\\[rank (\\d)\\] R(\\d) end");
  for (const auto& [text, first] : {std::pair{ran.out, 0}, std::pair{ran.err, 1}}) {
    std::map<int, int> next;  // rank -> next expected index in this stream
    std::map<int, bool> ended;
    for (const std::string& line : split_lines(text)) {
      if (line.rfind("proc_driver:", 0) == 0) continue;
      std::smatch m;
      INFO(line.substr(0, 120));
      REQUIRE(std::regex_match(line, m, line_re));
      if (m[1].matched) {
        const int rank = std::stoi(m[1]);
        CHECK(m[2] == m[1]);
        if (!next.count(rank)) next[rank] = first;
        REQUIRE(std::stoi(m[3]) == next[rank]);
        next[rank] += 2;
        CHECK(m[4].length() == kLen);
        CHECK(m[4].str() == std::string(kLen, static_cast<char>('a' + rank)));
      } else {
        CHECK(m[5] == m[6]);
        ended[std::stoi(m[5])] = true;  // the partial last line, flushed at exit
      }
    }
    REQUIRE(next.size() == kRanks);
    for (const auto& [rank, n] : next) CHECK(n == kLines + first);
    if (first == 0) CHECK(ended.size() == kRanks);
  }
}

TEST_CASE_METHOD(LauncherRun, "a line longer than the relay's limit is split into prefixed pieces",
                 "[proc]") {
  const Ran ran = run({"--nproc-per-node", "1", "--", kHelper, "long", "10000"});
  REQUIRE(ran.status == 0);
  const std::string piece = "[rank 0] " + std::string(4000, 'x') + "\n";
  CHECK(ran.out == piece + piece + "[rank 0] " + std::string(2000, 'x') + "\n");
}

TEST_CASE_METHOD(LauncherRun,
                 "log directory: one file per rank, unprefixed, appended across restarts",
                 "[proc]") {
  const std::string logs = dir / "logs/nested";
  const Ran ran =
      run(concat({"--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", logs, "--"},
                 sh("echo out $RANK $TORCHELASTIC_RESTART_COUNT; echo err $RANK >&2; "
                    "[ $TORCHELASTIC_RESTART_COUNT = 1 ] && exit 0; "
                    // Attempt 0 fails, by rank 1 once rank 0 has written (then rank 0 is stopped).
                    "if [ $RANK = 0 ]; then touch " +
                    (dir / "written") +
                    "; exec sleep 30; fi; "
                    "while [ ! -e " +
                    (dir / "written") + " ]; do sleep 0.02; done; exit 7")));
  CHECK(ran.status == 0);
  for (int rank : {0, 1}) {
    const std::string r = std::to_string(rank);
    const std::vector<std::string> lines = split_lines(read_file(logs + "/rank-" + r + ".log"));
    REQUIRE(lines.size() == 4);
    // Within one attempt stdout and stderr are two pipes: their relative order is not fixed.
    std::vector<std::string> first(lines.begin(), lines.begin() + 2);
    std::vector<std::string> second(lines.begin() + 2, lines.end());
    std::sort(first.begin(), first.end());
    std::sort(second.begin(), second.end());
    CHECK(first == std::vector<std::string>{"err " + r, "out " + r + " 0"});
    CHECK(second == std::vector<std::string>{"err " + r, "out " + r + " 1"});
  }
}

TEST_CASE_METHOD(LauncherRun, "a log directory that cannot be created: status 2, nothing started",
                 "[proc]") {
  std::ofstream(dir / "file") << "x";
  const std::string marker = dir / "started";
  const Ran ran = run(concat({"--nproc-per-node", "2", "--log-dir", dir / "file/logs", "--"},
                             sh("touch " + marker)));
  CHECK(ran.status == 2);
  CHECK(ran.err.find("log directory '" + (dir / "file/logs") + "'") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE_METHOD(LauncherRun,
                 "a log file path that is not a regular file is refused at once: status 2, nothing "
                 "started, nothing written through",
                 "[proc]") {
  const std::string logs = dir / "logs";
  std::filesystem::create_directories(logs);
  const std::string target = dir / "precious";
  std::ofstream(target) << "keep me\n";
  std::string why;
  SECTION("a FIFO, which open() would wait on forever") {
    REQUIRE(::mkfifo((logs + "/rank-0.log").c_str(), 0600) == 0);
    why = "is not a regular file";
  }
  SECTION("a symbolic link, which would truncate its target") {
    std::filesystem::create_symlink(target, logs + "/rank-0.log");
    why = "is a symbolic link";
  }
  SECTION("a device") {
    std::filesystem::create_symlink("/dev/null", logs + "/rank-0.log");
    why = "is a symbolic link";
  }
  const std::string marker = dir / "started";
  const Ran ran =
      run(concat({"--nproc-per-node", "2", "--log-dir", logs, "--"}, sh("touch " + marker)));
  INFO(ran.err);
  CHECK(ran.status == 2);
  CHECK(ran.seconds < 5);
  CHECK(ran.err.find("log file '" + logs + "/rank-0.log' " + why) != std::string::npos);
  CHECK(split_lines(ran.err).size() == 1);
  CHECK_FALSE(std::filesystem::exists(marker));
  CHECK(read_file(target) == "keep me\n");
}

TEST_CASE_METHOD(LauncherRun, "restarts: the whole group again, with the restart count exported",
                 "[proc]") {
  struct Case {
    int max_restarts;
    int succeed_from;  // the first restart count at which every worker exits 0
    int status;
    int restarts;
  };
  for (const Case& c : {Case{0, 0, 0, 0}, Case{0, 1, 5, 0}, Case{1, 2, 5, 1}, Case{3, 2, 0, 2}}) {
    DYNAMIC_SECTION("max " << c.max_restarts << ", succeeds from " << c.succeed_from) {
      const Ran ran = run(
          concat({"--nproc-per-node", "2", "--max-restarts", std::to_string(c.max_restarts), "--"},
                 // A failing attempt: rank 1 exits 5 once rank 0 has written its line.
                 sh("echo attempt $TORCHELASTIC_RESTART_COUNT; "
                    "[ $TORCHELASTIC_RESTART_COUNT -ge " +
                    std::to_string(c.succeed_from) + " ] && exit 0; M=" + dir.path() +
                    "/written.$TORCHELASTIC_RESTART_COUNT; "
                    "if [ $RANK = 0 ]; then touch $M; exec sleep 30; fi; "
                    "while [ ! -e $M ]; do sleep 0.02; done; exit 5")));
      CHECK(ran.status == c.status);
      if (launcher == PROC_DRIVER)  // RunResult::restarts, which only the driver prints
        CHECK(ran.err.find("restarts=" + std::to_string(c.restarts)) != std::string::npos);
      for (int k = 0; k <= c.restarts; ++k) {
        for (int rank : {0, 1}) {
          CHECK(ran.out.find("[rank " + std::to_string(rank) + "] attempt " + std::to_string(k)) !=
                std::string::npos);
        }
        if (k > 0) {
          CHECK(ran.err.find("dtlaunch: restarting all 2 workers (restart " + std::to_string(k) +
                             " of " + std::to_string(c.max_restarts) + ")") != std::string::npos);
        }
      }
      CHECK(ran.out.find("attempt " + std::to_string(c.restarts + 1)) == std::string::npos);
    }
  }
}

TEST_CASE_METHOD(LauncherRun,
                 "after SIGINT to the supervisor, a worker's death adds no SIGTERM for the others",
                 "[proc]") {
  // Rank 0 dies of the forwarded SIGINT; rank 1 records what it gets and would leave on SIGTERM.
  Child driver =
      start({"--nproc-per-node", "2", "--grace", "0.5", "--", "/bin/sh", "-c",
             "[ $RANK = 0 ] && exec sleep 30; exec " + kHelper + " record " + dir.path()});
  REQUIRE(eventually([&] { return read_file(dir / "rank1.txt") == "ready\n"; }));
  REQUIRE(eventually([&] {
    for (pid_t pid : children_of(driver.pid()))
      if (process_name(pid) == "sleep") return true;
    return false;
  }));
  driver.signal(SIGINT);
  CHECK(driver.wait_for(10s) == 128 + SIGINT);
  CHECK(read_file(dir / "rank1.txt") == "ready\nINT\n");  // then SIGKILL after the grace
  const std::string err = err_text();
  CHECK(err.find("rank 0 (local 0) on ") != std::string::npos);
  CHECK(err.find("failed: killed by SIGINT") != std::string::npos);
  CHECK(err.find("sent SIGTERM") == std::string::npos);
}

#ifdef DTLAUNCH
TEST_CASE("dtlaunch: bad input starts nothing", "[proc]") {
  TempDir dir;
  const std::string marker = dir / "started";
  const std::vector<std::string> program = {"--", "/bin/sh", "-c", "touch " + marker};
  struct Case {
    std::vector<std::string> args;
    int status;
    const char* names;  // what the one-line error must name
  };
  const std::vector<Case> cases = {
      {{"--nproc-per-node", "0"}, 2, "--nproc-per-node"},
      {{"--nproc-per-node", "-3"}, 2, "--nproc-per-node"},
      {{"--nproc-per-node", "2", "--nnodes", "0"}, 2, "--nnodes"},
      {{"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1",
        "--master-port", "29500"},
       2,
       "--node-rank"},
      {{"--nproc-per-node", "2", "--master-port", "65536"}, 2, "--master-port"},
      {{"--nproc-per-node", "2", "--max-restarts", "-1"}, 2, "--max-restarts"},
  };
  for (const Case& c : cases) {
    const Ran ran = run_program(concat(concat({DTLAUNCH}, c.args), program), dir);
    INFO(ran.err);
    CHECK(ran.status == c.status);
    CHECK(ran.err.find(c.names) != std::string::npos);
    CHECK(std::count(ran.err.begin(), ran.err.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(marker));
  }
}
#endif

TEST_CASE_METHOD(
    LauncherRun,
    "workers inherit an ignored SIGHUP (nohup) but never an ignored SIGCHLD or our handlers",
    "[proc]") {
  // The worker is grep itself: its SigIgn mask is what it got through fork and exec.
  Child driver = start({"--nproc-per-node", "1", "--", "/bin/grep", "SigIgn", "/proc/self/status"},
                       {SIGHUP, SIGCHLD});
  CHECK(driver.wait_for(10s) == 0);
  CHECK(out_text() == "[rank 0] SigIgn:\t0000000000000001\n");  // SIGHUP (1) only
}

namespace {

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z' zombie), ' ' when gone.
char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? ' ' : stat[paren + 2];
}

// The driver's children that are workers (not its guardian).
// The driver's children but its guard, once there are `count` of them (or as they are after the
// wait): the guard names itself dtlaunch-guard just after its fork, and on a loaded machine it
// was still "dtlaunch" when the workers were ready (CI, once: 3 workers).
std::vector<pid_t> workers_of(pid_t driver, std::size_t count) {
  std::vector<pid_t> workers;
  eventually([&] {
    workers.clear();
    for (pid_t pid : children_of(driver))
      if (process_name(pid) != "dtlaunch-guard") workers.push_back(pid);
    return workers.size() == count;
  });
  return workers;
}

}  // namespace

TEST_CASE_METHOD(LauncherRun,
                 "exit 75 ends the group and is passed through, even with --max-restarts",
                 "[proc]") {
  // The checkpoint-on-request worker: SIGUSR1 -> exit 75. Each attempt marks itself ready.
  Child driver =
      start({"--nproc-per-node", "2", "--max-restarts", "2", "--", "/bin/sh", "-c",
             "trap 'exit 75' USR1; touch " + dir.path() +
                 "/ready.$TORCHELASTIC_RESTART_COUNT.$RANK; while :; do sleep 0.05; done"});
  REQUIRE(eventually([&] {
    return std::filesystem::exists(dir / "ready.0.0") && std::filesystem::exists(dir / "ready.0.1");
  }));
  driver.signal(SIGUSR1);
  CHECK(driver.wait_for(10s) == 75);
  const std::string err = err_text();
  INFO(err);
  CHECK(err.find("restarting") == std::string::npos);
  CHECK(err.find("stopped to be resumed: exit 75 (EX_TEMPFAIL)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "ready.1.0"));
}

TEST_CASE_METHOD(LauncherRun,
                 "a worker that exited with the failed one is not counted as sent SIGTERM",
                 "[proc]") {
  // Rank 0 fails, rank 1 succeeds, at the same moment: both exit once "go" exists.
  Child driver = start({"--nproc-per-node", "2", "--", "/bin/sh", "-c",
                        "touch " + dir.path() + "/ready.$RANK; while [ ! -e " + dir.path() +
                            "/go ]; do sleep 0.01; done; [ $RANK = 0 ] && exit 3; exit 0"});
  REQUIRE(eventually([&] {
    return std::filesystem::exists(dir / "ready.0") && std::filesystem::exists(dir / "ready.1");
  }));
  // Both exit while the supervisor is stopped: it finds two zombies when it runs again.
  const std::vector<pid_t> workers = workers_of(driver.pid(), 2);
  REQUIRE(workers.size() == 2);
  driver.signal(SIGSTOP);
  std::ofstream(dir / "go") << "";
  CHECK(eventually([&] {
    for (pid_t pid : workers)
      if (process_state(pid) != 'Z') return false;
    return true;
  }));
  driver.signal(SIGCONT);
  CHECK(driver.wait_for(10s) == 3);
  const std::string err = err_text();
  INFO(err);
  CHECK(err.find("sent SIGTERM") == std::string::npos);
  CHECK(err.find("rank 0 (local 0) on ") != std::string::npos);
}

TEST_CASE_METHOD(LauncherRun,
                 "the same termination signal twice: SIGKILL at once, not after the grace",
                 "[proc]") {
  const int sig = GENERATE(SIGINT, SIGTERM);
  INFO("signal " << sig);
  // Workers that take the first signal and go on (saving state that takes too long).
  Child driver = start({"--nproc-per-node", "2", "--grace", "60", "--", "/bin/sh", "-c",
                        "trap 'echo got it' INT TERM; echo ready; while :; do sleep 0.05; done"});
  REQUIRE(eventually([&] {
    return split_lines(out_text()).size() == 2;  // "[rank N] ready" twice
  }));
  driver.signal(sig);
  REQUIRE(eventually([&] {
    return out_text().find("got it") != std::string::npos &&
           err_text().find("passed it to the workers") != std::string::npos;
  }));
  driver.signal(sig);
  CHECK(driver.wait_for(10s) == 128 + SIGKILL);
  const std::string err = err_text();
  INFO(err);
  CHECK(err.find(" again: sent SIGKILL to the 2 workers still running\n") != std::string::npos);
  CHECK(err.find("from dtlaunch: still running") == std::string::npos);  // not the grace's
}

TEST_CASE_METHOD(LauncherRun,
                 "Ctrl-Z stops the workers with the supervisor, SIGCONT continues them", "[proc]") {
  Child driver = start({"--nproc-per-node", "2", "--", kHelper, "record", dir.path()});
  REQUIRE(eventually([&] {
    return read_file(dir / "rank0.txt") == "ready\n" && read_file(dir / "rank1.txt") == "ready\n";
  }));
  const std::vector<pid_t> workers = workers_of(driver.pid(), 2);
  REQUIRE(workers.size() == 2);
  auto all_in = [&](char state) {
    return [&, state] {
      if (process_state(driver.pid()) != state) return false;
      for (pid_t pid : workers)
        if (process_state(pid) != state) return false;
      return true;
    };
  };
  driver.signal(SIGTSTP);
  CHECK(eventually(all_in('T')));
  driver.signal(SIGCONT);
  CHECK(eventually(all_in('S')));
  driver.signal(SIGTERM);  // the recorders exit 0 on SIGTERM
  CHECK(driver.wait_for(10s) == 0);
  // Stopped and continued, not signalled: a worker records only the SIGTERM.
  for (int rank : {0, 1})
    CHECK(read_file(dir / ("rank" + std::to_string(rank) + ".txt")) == "ready\nTERM\n");
}

TEST_CASE_METHOD(LauncherRun,
                 "output that cannot be written: one warning per destination, the run goes on",
                 "[proc]") {
  const std::vector<std::string> program =
      sh("for i in 1 2 3; do echo out $i; echo err $i >&2; "
         "sleep 0.02; done; echo done $RANK > " +
         dir.path() + "/done.$RANK");
  SECTION("stdout on a full device") {
    Child driver = start_writing_to("/dev/full", concat({"--nproc-per-node", "2", "--"}, program));
    CHECK(driver.wait_for(10s) == 0);
    const std::string err = err_text();
    INFO(err);
    const std::string warning =
        "dtlaunch: cannot write the workers' output to stdout (/dev/full): No space left on "
        "device; dropping it from now on, the workers go on\n";
    CHECK(err.find(warning) != std::string::npos);
    CHECK(err.find(warning) == err.rfind(warning));            // once
    CHECK(err.find("[rank 1] err 3\n") != std::string::npos);  // stderr still relayed
  }
  SECTION("a rank's log file that cannot grow (the file size limit: EFBIG)") {
    // A log file is never a device or a link (see the test above); a full file system is
    // stood in for by `ulimit -f`, with SIGXFSZ ignored as a careful caller would.
    const std::string logs = dir / "logs";
    const std::vector<std::string> big =
        sh("i=0; while [ $i -lt 200 ]; do [ $RANK = 0 ] && echo "
           "0123456789012345678901234567890123456789; "
           "i=$((i+1)); done; for i in 1 2 3; do echo out $i; echo err $i >&2; done; "
           "echo done $RANK > " +
           dir.path() + "/done.$RANK");
    Child driver(concat({"/bin/sh", "-c", "ulimit -f 8 && exec \"$@\"", "sh", launcher,
                         "--nproc-per-node", "2", "--log-dir", logs, "--"},
                        big),
                 "/dev/null", dir / "err", {SIGXFSZ});
    CHECK(driver.wait_for(10s) == 0);
    const std::string err = err_text();
    INFO(err);
    const std::string warning = "dtlaunch: cannot write '" + logs +
                                "/rank-0.log': File too large; this log stops here, "
                                "the workers go on\n";
    CHECK(err.find(warning) != std::string::npos);
    CHECK(err.find(warning) == err.rfind(warning));
    CHECK(err.find("rank-1.log") == std::string::npos);
    CHECK(split_lines(read_file(logs + "/rank-1.log")).size() == 6);
  }
  for (int rank : {0, 1}) CHECK(std::filesystem::exists(dir / ("done." + std::to_string(rank))));
}

TEST_CASE_METHOD(LauncherRun,
                 "a worker has exactly the descriptors the supervisor inherited, none of its own",
                 "[proc]") {
  // One inherited descriptor high up, as a shell's `exec 200>file` gives: the supervisor keeps
  // its own per-worker descriptors above those it inherited, and must pass all of these on.
  const int inherited = ::open("/dev/null", O_RDONLY);
  REQUIRE(inherited >= 0);
  REQUIRE(::dup2(inherited, 200) == 200);
  ::close(inherited);
  // ls itself, not a shell's pipeline, whose own pipes would come and go in the listing.
  const std::vector<std::string> list = {"/bin/ls", "/proc/self/fd"};
  Child direct(list, dir / "direct.out", dir / "direct.err");
  CHECK(direct.wait_for(10s) == 0);
  Child driver = start(concat({"--nproc-per-node", "3", "--"}, list));
  CHECK(driver.wait_for(10s) == 0);
  ::close(200);
  const std::vector<std::string> expected = split_lines(read_file(dir / "direct.out"));
  const std::string out = out_text();
  INFO("stderr: " << err_text() << "\nstdout:\n" << out);
  CHECK(std::count(expected.begin(), expected.end(), "200") == 1);
  for (int rank : {0, 1, 2}) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    std::vector<std::string> listed;
    for (const std::string& line : split_lines(out))
      if (line.rfind(prefix, 0) == 0) listed.push_back(line.substr(prefix.size()));
    CHECK(listed == expected);
  }
}

TEST_CASE_METHOD(
    LauncherRun,
    "a stalled reader of stdout never stops supervision: output is dropped with a warning",
    "[proc]") {
  // A real stalled reader: the FIFO is open for reading here and never read, as `| sleep 30`.
  const std::string fifo = dir / "stdout.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int reader = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(reader >= 0);
  Child driver = start_writing_to(
      fifo, concat({"--nproc-per-node", "2", "--grace", "20", "--"},
                   sh("yes 0123456789012345678901234567890123456789012345678901234567890123 | "
                      "head -c 6000000; echo > " +
                      dir.path() + "/done.$RANK; exec sleep 100")));
  // The workers' 6 MB each (more than dtlaunch keeps waiting) are taken off them although
  // nobody reads: they are not held up.
  CHECK(eventually(
      [&] {
        return std::filesystem::exists(dir / "done.0") && std::filesystem::exists(dir / "done.1");
      },
      30s));
  driver.signal(SIGTERM);
  CHECK(driver.wait_for(5s) == 128 + SIGTERM);  // answered at once, not when the reader reads
  ::close(reader);
  const std::string err = err_text();
  INFO(err);
  CHECK(err.find("dtlaunch: stdout is not being read") != std::string::npos);
  CHECK(err.find("passed it to the workers") != std::string::npos);
}

TEST_CASE_METHOD(
    LauncherRun,
    "too few descriptors for the workers: said before anything starts, or the soft limit "
    "raised for dtlaunch alone",
    "[proc]") {
  const std::string marker = dir / "started";
  SECTION("the hard limit is too low: status 2, how many are needed") {
    const Ran ran =
        run_program(concat({"/bin/sh", "-c", "ulimit -n 64 && exec \"$@\"", "sh", launcher,
                            "--nproc-per-node", "300", "--log-dir", dir / "logs", "--"},
                           sh("touch " + marker + ".$RANK")),
                    dir);
    INFO(ran.err);
    CHECK(ran.status == 2);
    CHECK(std::regex_search(ran.err, std::regex("300 workers need [0-9]+ file descriptors, and "
                                                "the limit \\(ulimit -n\\) is 64")));
    CHECK(split_lines(ran.err).size() == 1);
    CHECK_FALSE(std::filesystem::exists(marker + ".0"));
    CHECK_FALSE(std::filesystem::exists(dir / "logs"));
  }
  SECTION("the soft limit is too low and the hard one enough: raised, the workers keep 64") {
    const Ran ran =
        run_program(concat({"/bin/sh", "-c", "ulimit -Sn 64 && ulimit -Hn 4096 && exec \"$@\"",
                            "sh", launcher, "--nproc-per-node", "100", "--"},
                           sh("ulimit -Sn")),
                    dir);
    INFO(ran.err);
    CHECK(ran.status == 0);
    CHECK(std::regex_search(ran.err, std::regex("raised its soft limit of file descriptors "
                                                "\\(ulimit -n\\) from 64 to [0-9]+")));
    const std::vector<std::string> lines = split_lines(ran.out);
    CHECK(lines.size() == 100);
    CHECK(std::count_if(lines.begin(), lines.end(),
                        [](const std::string& l) { return l.ends_with("] 64"); }) == 100);
  }
}

TEST_CASE_METHOD(LauncherRun,
                 "a stopped worker gets SIGCONT with its SIGTERM: the grace is not spent waiting",
                 "[proc]") {
  // Rank 1 stops itself (as a debugger or a user's `kill -STOP` would leave it); rank 0 then
  // fails. A stopped process keeps a SIGTERM pending until it is continued.
  const std::string stopped = dir / "stopping";
  const Ran ran = run(concat({"--nproc-per-node", "2", "--grace", "20", "--"},
                             sh("if [ $RANK = 1 ]; then touch " + stopped +
                                "; kill -STOP $$; exec sleep 100; fi; "
                                "while [ ! -e " +
                                stopped + " ]; do sleep 0.02; done; sleep 0.3; exit 1")));
  INFO(ran.err);
  CHECK(ran.status == 1);
  CHECK(ran.seconds < 10);
  CHECK(ran.err.find("still running 20 s after SIGTERM") == std::string::npos);
}
