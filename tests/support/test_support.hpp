// What several test areas need from the OS, written once: a scratch directory, whole-file reads,
// and N ranks of a program started as real processes the way a launcher would (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT), each
// with its stdout and stderr in a log file of its own. No Catch2 and no LibTorch in here.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "launch/system.hpp"  // find_free_port, which the tests that use Ranks call

namespace dtlaunch_test {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents at destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view tag = "dtlaunch-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The whole file; "" when it is missing.
std::string read_file(const std::filesystem::path& path);

// The lines of `text`, without their '\n'; a last line without one counts too.
std::vector<std::string> split_lines(const std::string& text);

struct RankOptions {
  // The ranks to start, a subset of 0..world-1 (to leave some missing); empty: all of them.
  std::vector<int> launch;
  // Set after the launch variables, so they can override them too.
  std::map<std::string, std::string> env;
};

class Ranks {
 public:
  // Starts the ranks of a world of `world`; rank r logs to log_dir/<tag>-rank<r>.log. The
  // children get this process's environment minus any launch variables it inherited (a test
  // run under dtlaunch or torchrun must not leak its own RANK), then theirs, then options.env.
  Ranks(const std::string& program, const std::vector<std::string>& args, int world,
        const std::filesystem::path& log_dir, const std::string& tag, RankOptions options = {});
  // Kills (SIGKILL) and reaps whatever still runs, so that a failed check leaves nothing behind.
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  // The ranks started, in the order of RankOptions::launch.
  const std::vector<int>& launched() const { return launched_; }
  // The rank's process id while it has not been reaped, else -1.
  pid_t pid(int rank) const { return pids_.at(index_of(rank)); }
  std::string log(int rank) const;

  // Polls rank's log until it contains text; false once timeout passes or every rank has exited.
  bool wait_for_output(int rank, const std::string& text, std::chrono::seconds timeout);

  // Waits for every launched rank and returns their exit statuses (128+N for one killed by
  // signal N), in launch order; -1 for a rank still running at the timeout (the destructor
  // kills it).
  std::vector<int> wait_all(std::chrono::seconds timeout);

 private:
  size_t index_of(int rank) const;
  // Reaps the ranks that have exited, recording their status; returns how many still run.
  size_t reap();

  std::vector<int> launched_;
  std::vector<pid_t> pids_;  // -1 once reaped
  std::vector<int> status_;
  std::vector<std::filesystem::path> logs_;
};

}  // namespace dtlaunch_test
