// srun's output, told apart: srun runs every attempt with --label, so that each line a task
// prints starts with its task id ("  3: ") and srun's own messages ("srun: error: cn2: task 3:
// Killed") do not. Only srun's own lines are evidence of how a task ended: a program that prints
// a line that looks like srun's cannot end, restart or steer the job (docs/security.md). The
// labels are taken off again before the output is passed on, so that the job's log reads as it
// would without them, unless the user asked srun for them (--srun-arg=--label).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace dtlaunch::job {

enum class LineSource {
  kSrun,  // srun's own message (no label)
  kTask,  // a task's output (its label taken off)
};

// One of srun's output streams, fed as it comes, in pieces cut anywhere. For each complete line
// it calls `on_line` with the line (label taken off) and where it came from; feed returns what to
// pass on: the same bytes, with the labels taken off when `strip_labels`. A line start that could
// still become a label waits for its next bytes (at most a few); a line over `max_line` bytes is
// passed on but not read (no status line is that long). srun --label cuts a task's line every
// 1,024 bytes, each piece behind the label: with the labels taken off, a newline after a piece
// of exactly that size is held until the next line's label, and dropped when it is the same
// task's (a line the task ended at exactly 1,024 bytes, followed by its next, is joined: rare,
// and a cut every 1,024 bytes of a progress bar's line is not).
class SrunOutput {
 public:
  using OnLine = std::function<void(std::string_view line, LineSource source)>;
  SrunOutput(bool strip_labels, OnLine on_line, std::size_t max_line = 65536)
      : strip_labels_(strip_labels), on_line_(std::move(on_line)), max_line_(max_line) {}

  std::string feed(std::string_view data);
  // The end of the stream: a last line without a newline is read too.
  std::string finish();

 private:
  void take(char c, std::string& out);
  void end_head(std::string& out, bool labelled);
  void end_line();
  void release_cut(std::string& out);

  static constexpr std::size_t kSrunPiece = 1024;

  bool strip_labels_;
  OnLine on_line_;
  std::size_t max_line_;
  enum class State { kHead, kBody } state_ = State::kHead;
  std::string head_;  // a line's first bytes while they may still be a label
  bool labelled_ = false;
  std::string label_;      // the current line's label, as srun wrote it
  std::size_t piece_ = 0;  // bytes since it
  std::string cut_label_;  // a newline held after a piece of kSrunPiece bytes with this label
  std::string line_;       // the current line, without its label, for on_line
  bool too_long_ = false;
};

}  // namespace dtlaunch::job
