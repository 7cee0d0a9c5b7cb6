// Where a worker's lines go: dtlaunch's stdout or stderr with the rank prefix, the rank's log
// file without it, and the tail kept for the failure report.
#pragma once

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

// dtlaunch's own stdout and stderr. A destination whose reader went away (EPIPE) is dropped
// and the workers' output is still drained, so that they never block on a full pipe.
class Console {
 public:
  void write(int fd, std::string_view text);

 private:
  bool closed_[3] = {false, false, false};
};

// One file per rank, <dir>/rank-<R>.log, created on first use and kept open across restarts.
class LogFiles {
 public:
  // Creates dir if missing. Throws Error (kBadInput) naming the directory when it cannot.
  explicit LogFiles(std::optional<std::string> dir);
  // The file of `rank` (truncated when first opened), or -1 without a log directory.
  int fd_for(std::uint32_t rank);

 private:
  std::optional<std::string> dir_;
  std::map<std::uint32_t, UniqueFd> files_;
};

// One stream (stdout or stderr) of one worker. Lines are batched into writes of at most
// PIPE_BUF bytes, each holding whole prefixed lines only.
class StreamRelay {
 public:
  StreamRelay(Console& console, int console_fd, std::string prefix, int log_fd, LineTail& tail)
      : console_(console),
        console_fd_(console_fd),
        prefix_(std::move(prefix)),
        log_fd_(log_fd),
        tail_(tail) {}

  void feed(std::string_view data);
  void finish();  // end of stream: the partial last line is relayed as a line

 private:
  void add_line(std::string_view line);
  void flush();

  Console& console_;
  int console_fd_;
  std::string prefix_;
  int log_fd_;
  LineTail& tail_;
  LineSplitter splitter_{kMaxRelayedLine};
  std::string console_batch_, log_batch_;
};

}  // namespace dtlaunch
