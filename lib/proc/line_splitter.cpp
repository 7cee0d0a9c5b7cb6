#include "proc/line_splitter.hpp"

namespace dtlaunch::proc {

void LineSplitter::feed(std::string_view data, const LineFn& on_line) {
  while (!data.empty()) {
    const std::size_t room = max_line_ - pending_.size();
    const std::size_t nl = data.find('\n');
    if (nl != std::string_view::npos && nl <= room) {
      if (pending_.empty()) {
        on_line(data.substr(0, nl));  // the common case: no copy
      } else {
        pending_.append(data.substr(0, nl));
        on_line(pending_);
        pending_.clear();
      }
      data.remove_prefix(nl + 1);
    } else if (data.size() > room) {
      // No newline within the limit: relay a full piece now. A piece is cut only once a byte
      // past it is seen, so a line of exactly max_line bytes stays one line across reads.
      pending_.append(data.substr(0, room));
      on_line(pending_);
      pending_.clear();
      data.remove_prefix(room);
    } else {
      pending_.append(data);
      return;
    }
  }
}

void LineSplitter::finish(const LineFn& on_line) {
  if (pending_.empty()) return;
  on_line(pending_);
  pending_.clear();
}

void LineTail::push(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.emplace_back(line);
}

}  // namespace dtlaunch::proc
