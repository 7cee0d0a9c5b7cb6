// Where a worker's lines go: dtlaunch's stdout or stderr with the rank prefix, the rank's log
// file without it, and the tail kept for the failure report.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "proc/fd.hpp"
#include "proc/line_splitter.hpp"

namespace dtlaunch {

// A line longer than this is split (line_splitter.hpp); with the longest prefix it still fits
// in PIPE_BUF (4096 bytes), so even when dtlaunch's stdout is a pipe shared with other
// processes no relayed line is ever torn apart by another writer.
inline constexpr std::size_t kMaxRelayedLine = 4000;

// dtlaunch's own stdout and stderr. A destination that cannot be written is dropped and the
// workers' output is still drained, so that they never block on a full pipe and the run goes
// on. A reader that went away (EPIPE: `dtlaunch ... | head`) is dropped silently; any other
// error (a full disk: ENOSPC, EIO, EFBIG, ...) is said once on stderr, naming the file.
class Console {
 public:
  void write(int fd, std::string_view text);
  // One line of dtlaunch's own about its output (text ends in '\n'), on stderr if it works.
  void warn(std::string_view text) { write(STDERR_FILENO, text); }

 private:
  bool closed_[3] = {false, false, false};
};

// A rank's log file; `failed` once a write failed (then it is not written again).
struct LogFile {
  UniqueFd fd;
  std::string path;
  bool failed = false;
};

// One file per rank, <dir>/rank-<R>.log, created on first use and kept open across restarts.
class LogFiles {
 public:
  // Creates dir if missing. Throws Error (kBadInput) naming the directory when it cannot. The
  // files' descriptors go at or above fd_base (move_at_or_above).
  explicit LogFiles(std::optional<std::string> dir, int fd_base = 0);
  // The file of `rank` (truncated when first opened), or nullptr without a log directory.
  // Stays valid as long as this object.
  LogFile* for_rank(std::uint32_t rank);

 private:
  std::optional<std::string> dir_;
  int fd_base_;
  std::map<std::uint32_t, LogFile> files_;
};

// One stream (stdout or stderr) of one worker. Lines are batched into writes of at most
// PIPE_BUF bytes, each holding whole prefixed lines only.
class StreamRelay {
 public:
  // log: the rank's file, or nullptr.
  StreamRelay(Console& console, int console_fd, std::string prefix, LogFile* log, LineTail& tail)
      : console_(console),
        console_fd_(console_fd),
        prefix_(std::move(prefix)),
        log_(log),
        tail_(tail) {}

  void feed(std::string_view data);
  void finish();  // end of stream: the partial last line is relayed as a line

 private:
  void add_line(std::string_view line);
  void flush();

  Console& console_;
  int console_fd_;
  std::string prefix_;
  LogFile* log_;
  LineTail& tail_;
  LineSplitter splitter_{kMaxRelayedLine};
  std::string console_batch_, log_batch_;
};

}  // namespace dtlaunch
