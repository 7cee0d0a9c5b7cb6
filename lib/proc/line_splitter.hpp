// Cuts a worker's byte stream into lines so that each can be relayed whole with its rank prefix.
// Pure: no I/O, so the splitting rules are tested on their own.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::proc {

class LineSplitter {
 public:
  // A line longer than max_line bytes is cut into pieces of max_line bytes, each relayed as a
  // line of its own: memory stays bounded whatever the worker writes (a progress bar that only
  // ever writes '\r' included), and every relayed write fits in one atomic pipe write.
  explicit LineSplitter(std::size_t max_line) : max_line_(max_line == 0 ? 1 : max_line) {}

  using LineFn = std::function<void(std::string_view line)>;

  // Calls on_line once per complete line in data (without its '\n'), in order, and keeps the
  // unterminated rest for the next call.
  void feed(std::string_view data, const LineFn& on_line);
  // The stream ended: a pending unterminated line is passed to on_line as if terminated.
  void finish(const LineFn& on_line);

  bool has_pending() const { return !pending_.empty(); }

 private:
  std::size_t max_line_;
  std::string pending_;
};

// The last `capacity` lines a worker wrote, oldest first, for the failure report.
class LineTail {
 public:
  explicit LineTail(std::size_t capacity) : capacity_(capacity) {}
  void push(std::string_view line);
  std::vector<std::string> lines() const { return {lines_.begin(), lines_.end()}; }

 private:
  std::size_t capacity_;
  std::deque<std::string> lines_;
};

}  // namespace dtlaunch::proc
