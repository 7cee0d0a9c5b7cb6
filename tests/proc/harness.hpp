// Running the supervisor's test programs as real processes and looking at what they left.
// The test process makes itself a child subreaper, so that anything the program under test
// fails to reap or kill is re-parented to the test, where it is seen.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace proctest {

using dtlaunch_test::read_file;  // "" when missing
using dtlaunch_test::TempDir;

using dtlaunch_test::split_lines;
std::vector<pid_t> read_pids(const std::string& path);  // one pid per line

// The test's children, live or zombie, from /proc (written independently of lib/proc).
std::vector<pid_t> children_of(pid_t parent);
bool exists(pid_t pid);           // /proc/<pid> is there (zombies included)
std::string process_name(pid_t);  // /proc/<pid>/comm, "" if gone

// A program started with its stdout and stderr in files.
class Child {
 public:
  // `ignored`: signals set to SIG_IGN in the child before exec (as nohup or a parent would).
  Child(const std::vector<std::string>& argv, const std::string& out_path,
        const std::string& err_path, const std::vector<int>& ignored = {});
  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // The shell-style status (code, or 128+signal), or nullopt after `timeout` (then the child
  // is killed with SIGKILL and reaped).
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

struct Ran {
  int status = -1;  // -1: timed out
  std::string out, err;
  double seconds = 0;
};

// Runs argv (a program path and its arguments), its output in dir; fails the test on a timeout
// and checks that nothing of the program's process tree is left once it is reaped.
Ran run_program(const std::vector<std::string>& argv, const TempDir& dir,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// run_program of proc_driver with args.
Ran run_driver(const std::vector<std::string>& args, const TempDir& dir,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Waits until every child of the test has exited and reaps them (orphans re-parented here),
// for at most `timeout`. Returns the children still alive then.
std::vector<pid_t> settle(std::chrono::milliseconds timeout);

// Polls until pred() holds or timeout passes; returns pred().
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10));

void become_subreaper();

}  // namespace proctest

#include <thread>

template <class Pred>
bool proctest::eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}
