// Starts N ranks of dtlaunch-train as real processes on this host, the way a launcher would
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT),
// each with its stdout and stderr in a log file of its own.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace dtlaunch::train_test {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& path);

class Ranks {
 public:
  // Starts `world` ranks of program with args; rank r logs to log_dir/<tag>-rank<r>.log.
  Ranks(const std::string& program, const std::vector<std::string>& args, int world,
        const std::filesystem::path& log_dir, const std::string& tag);
  // Kills (SIGKILL) and reaps whatever still runs, so that a failed check leaves nothing behind.
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  // The rank's process id while it has not been reaped, else -1.
  pid_t pid(int rank) const { return pids_.at(static_cast<size_t>(rank)); }
  std::string log(int rank) const;

  // Polls rank's log until it contains text; false once timeout passes or every rank has exited.
  bool wait_for_output(int rank, const std::string& text, std::chrono::seconds timeout);

  // Waits for every rank and returns the exit statuses (128+N for a rank killed by signal N).
  // On timeout, kills the remaining ranks and reports -1 for them.
  std::vector<int> wait_all(std::chrono::seconds timeout);

 private:
  // Reaps the ranks that have exited, recording their status; returns how many still run.
  size_t reap();

  std::vector<pid_t> pids_;  // -1 once reaped
  std::vector<int> status_;
  std::vector<std::filesystem::path> logs_;
};

}  // namespace dtlaunch::train_test
