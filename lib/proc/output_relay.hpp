// Where a worker's lines go: dtlaunch's stdout or stderr with the rank prefix, the rank's log
// file without it, and the tail kept for the failure report.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "proc/fd.hpp"
#include "proc/line_splitter.hpp"

namespace dtlaunch::proc {

// A line longer than this is split (line_splitter.hpp); with the longest prefix it still fits
// in PIPE_BUF (4096 bytes), so even when dtlaunch's stdout is a pipe shared with other
// processes no relayed line is ever torn apart by another writer.
inline constexpr std::size_t kMaxRelayedLine = 4000;

// dtlaunch's own stdout and stderr, written without ever blocking: a reader that stalls (a
// terminal on hold, `| sleep 30`, a full pipe) must not stop supervision, or signals go
// unanswered while the workers run on. What the destination does not take at once waits, in
// the order written, up to kMaxPendingOutput bytes per stream; beyond that the workers' output
// is dropped, said once on stderr when it starts and with a count when the reader is back.
// A destination that cannot be written is dropped and the workers' output is still drained,
// so that they never block on a full pipe and the run goes on. A reader that went away (EPIPE:
// `dtlaunch ... | head`) is dropped silently; any other error (a full disk: ENOSPC, EIO,
// EFBIG, ...) is said once on stderr, naming the file.
inline constexpr std::size_t kMaxPendingOutput = 4 << 20;

class Console {
 public:
  explicit Console(std::size_t max_pending = kMaxPendingOutput) : max_pending_(max_pending) {}
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // Queues text (whole lines, at most PIPE_BUF bytes per call to keep them whole in a shared
  // pipe) and writes what the destination takes now.
  void write(int fd, std::string_view text);
  // One line of dtlaunch's own about its output (text ends in '\n'), on stderr if it works.
  void warn(std::string_view text) { write(STDERR_FILENO, text); }

  // The descriptor to poll for POLLOUT while fd (1 or 2) has output waiting, else -1.
  int waiting_fd(int fd) const;
  // Writes what fd's destination takes now (after poll said it is writable).
  void flush(int fd);
  bool idle() const { return streams_[1].pending.empty() && streams_[2].pending.empty(); }
  // Waits until everything queued is written, or until stop_fd is readable (a signal); then
  // returns false with the rest still queued.
  bool drain(int stop_fd);
  // Gives up what is still queued, with a word on stderr if it can take one.
  void discard(std::string_view why);

 private:
  struct Stream {
    bool open = false;    // set up (the non-blocking descriptor below chosen)
    bool closed = false;  // dropped for good (EPIPE or another error)
    UniqueFd reopened;    // a non-blocking open file description of our own, for pipes/ttys
    bool socket = false;  // send(MSG_DONTWAIT) on the descriptor itself
    std::deque<std::string> pending;
    std::size_t pending_bytes = 0;
    std::size_t front_written = 0;  // bytes of pending.front() already written
    std::uint64_t dropped_bytes = 0, dropped_lines = 0;
  };
  void set_up(int fd);
  // One non-blocking write attempt; bytes written, 0 when it would block, -1 (errno) on error.
  ssize_t try_write(int fd, std::string_view data);
  void fail(int fd, int error);
  void note_dropped(int fd, std::string_view text);

  std::size_t max_pending_;
  Stream streams_[3];
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

}  // namespace dtlaunch::proc
