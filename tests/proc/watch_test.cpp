// `dtlaunch --watch`'s parent and its heartbeat (watch/watch.hpp, proc/watch.hpp) with real
// processes, signals and sockets on loopback: watch_driver is the launcher without Slurm's
// check-in. Each test checks that nothing of its process trees is left (the test is a child
// subreaper, so a program orphaned by its launcher's death would be re-parented here).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "dtlaunch_catch.hpp"
#include "harness.hpp"

using namespace proctest;
using namespace std::chrono_literals;

namespace {

const std::string kDriver = WATCH_DRIVER;
const std::string kHelper = PROC_HELPER;

// One task: RANK WORLD DIR GRACE_MS TIMEOUT_MS PROGRAM...
std::vector<std::string> task(int rank, int world, const TempDir& dir, int grace_ms,
                              std::vector<std::string> program, int timeout_ms = 3000) {
  std::vector<std::string> argv = {
      kDriver,    std::to_string(rank),     std::to_string(world),
      dir.path(), std::to_string(grace_ms), std::to_string(timeout_ms)};
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::string at(const TempDir& dir, const std::string& name) {
  return dir.path() + "/" + name;
}

std::string out_of(const TempDir& dir, const std::string& name) {
  return read_file(at(dir, name));
}

// Two tasks whose programs ignore SIGTERM and say "ready"; returns once both run.
struct TwoTasks {
  explicit TwoTasks(const TempDir& dir)
      : t0(task(0, 2, dir, 500, {kHelper, "ignore-term", "60", at(dir, "ready")}), at(dir, "0.out"),
           at(dir, "0.err")),
        t1(task(1, 2, dir, 500, {kHelper, "ignore-term", "60", at(dir, "ready")}), at(dir, "1.out"),
           at(dir, "1.err")) {
    const std::string ready = at(dir, "ready");
    REQUIRE(eventually([&] { return split_lines(read_file(ready)).size() == 2; }));
    std::this_thread::sleep_for(1500ms);  // a few heartbeats: both rings are up
  }
  Child t0, t1;
};

}  // namespace

TEST_CASE("watch: the program's exit status passes through, its death by signal as 128+N",
          "[watch]") {
  become_subreaper();
  TempDir dir;
  Child exits(task(0, 1, dir, 500, {"/bin/sh", "-c", "exit 7"}), at(dir, "a.out"),
              at(dir, "a.err"));
  CHECK(exits.wait_for(10s) == 7);
  Child killed(task(0, 1, dir, 500, {"/bin/sh", "-c", "kill -KILL $$"}), at(dir, "b.out"),
               at(dir, "b.err"));
  CHECK(killed.wait_for(10s) == 128 + SIGKILL);
  Child missing(task(0, 1, dir, 500, {"/nonexistent/program"}), at(dir, "c.out"), at(dir, "c.err"));
  CHECK(missing.wait_for(10s) == 127);
  CHECK(settle(5s).empty());
}

TEST_CASE("watch: every signal dtlaunch gets reaches the program (SIGUSR2 included)", "[watch]") {
  become_subreaper();
  TempDir dir;
  Child t(task(0, 1, dir, 500, {kHelper, "record", dir.path()}), at(dir, "t.out"),
          at(dir, "t.err"));
  const std::string record = at(dir, "rank0.txt");
  REQUIRE(eventually([&] { return read_file(record) == "ready\n"; }));
  for (int sig : {SIGUSR2, SIGUSR1, SIGHUP, SIGINT}) {
    const std::size_t before = split_lines(read_file(record)).size();
    t.signal(sig);
    REQUIRE(eventually([&] { return split_lines(read_file(record)).size() == before + 1; }));
  }
  t.signal(SIGTERM);  // the helper exits 0 on SIGTERM: dtlaunch with it
  CHECK(t.wait_for(10s) == 0);
  CHECK(read_file(record) == "ready\nUSR2\nUSR1\nHUP\nINT\nTERM\n");
  CHECK(settle(5s).empty());
}

TEST_CASE("watch: a killed peer stops the program (SIGTERM, grace, SIGKILL) and dtlaunch exits 76",
          "[watch]") {
  become_subreaper();
  TempDir dir;
  TwoTasks tasks(dir);
  const auto start = std::chrono::steady_clock::now();
  tasks.t1.signal(SIGKILL);  // its program dies with it (PR_SET_PDEATHSIG)
  CHECK(tasks.t1.wait_for(5s) == 128 + SIGKILL);
  CHECK(tasks.t0.wait_for(3s + 5s) == 76);
  CHECK(std::chrono::steady_clock::now() - start >= 500ms);  // the grace was given
  const std::string err = out_of(dir, "0.err");
  CHECK_THAT(err, Catch::Contains("a peer was lost: rank 1 (") && Catch::Contains("exited") &&
                      Catch::Contains("exit 76"));
  CHECK(split_lines(err).size() == 1);
  CHECK(settle(5s).empty());  // the killed launcher's program did not run on orphaned
}

TEST_CASE("watch: a frozen peer (launcher and program stopped) is lost within the timeout",
          "[watch]") {
  become_subreaper();
  TempDir dir;
  TwoTasks tasks(dir);
  const auto start = std::chrono::steady_clock::now();
  tasks.t1.signal(SIGSTOP);
  CHECK(tasks.t0.wait_for(3s + 5s) == 76);
  CHECK(std::chrono::steady_clock::now() - start >= 3s);
  CHECK_THAT(out_of(dir, "0.err"), Catch::Contains("rank 1 (") && Catch::Contains("frozen"));
  tasks.t1.signal(SIGKILL);
  tasks.t1.signal(SIGCONT);
  tasks.t1.wait_for(5s);
  CHECK(settle(5s).empty());
}

TEST_CASE("watch: a peer whose program ends normally says goodbye: no loss", "[watch]") {
  become_subreaper();
  TempDir dir;
  Child t0(task(0, 2, dir, 500, {"/bin/sh", "-c", "sleep 5; exit 3"}), at(dir, "0.out"),
           at(dir, "0.err"));
  Child t1(task(1, 2, dir, 500, {"/bin/sh", "-c", "sleep 1"}), at(dir, "1.out"), at(dir, "1.err"));
  CHECK(t1.wait_for(10s) == 0);
  CHECK(t0.wait_for(10s) == 3);  // past the 3 s timeout after rank 1 left, and not 76
  CHECK(out_of(dir, "0.err").empty());
  CHECK(settle(5s).empty());
}

// Issue 35 E: children that keep the task's stdout open held the srun step 64 s after the
// program exited 0. --watch now sweeps them as local mode does: those in the program's group
// and those that left it (setsid), which come back to dtlaunch as a subreaper.
TEST_CASE("watch: what the program left running is killed when it exits", "[watch]") {
  become_subreaper();
  TempDir dir;
  const auto started = std::chrono::steady_clock::now();
  Child leaves(task(0, 1, dir, 500,
                    {"/bin/sh", "-c", "sleep 60 & setsid sleep 61 & sleep 0.3; exit 0"}),
               at(dir, "a.out"), at(dir, "a.err"));
  CHECK(leaves.wait_for(20s) == 0);
  CHECK(std::chrono::steady_clock::now() - started < 15s);
  CHECK(settle(5s).empty());
}
