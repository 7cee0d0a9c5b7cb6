#include "job/srun_output.hpp"

namespace dtlaunch::job {

namespace {

// srun's label: blanks (it pads the task id to the widest one), digits, ':', ' '.
enum class Head { kMaybe, kLabel, kNot };

Head classify_head(std::string_view head) {
  std::size_t i = 0;
  while (i < head.size() && head[i] == ' ') ++i;
  const std::size_t digits_start = i;
  while (i < head.size() && head[i] >= '0' && head[i] <= '9') ++i;
  if (i == head.size()) return head.size() > 16 ? Head::kNot : Head::kMaybe;
  if (i == digits_start || head[i] != ':') return Head::kNot;
  if (++i == head.size()) return Head::kMaybe;
  return head[i] == ' ' && i + 1 == head.size() ? Head::kLabel : Head::kNot;
}

}  // namespace

void SrunOutput::end_head(std::string& out, bool labelled) {
  labelled_ = labelled;
  if (!labelled) {
    line_ += head_;
    out += head_;
  } else {
    label_ = head_;
    if (!strip_labels_) out += head_;
  }
  head_.clear();
  piece_ = 0;
  state_ = State::kBody;
}

void SrunOutput::end_line() {
  if (!too_long_) on_line_(line_, labelled_ ? LineSource::kTask : LineSource::kSrun);
  line_.clear();
  too_long_ = false;
  labelled_ = false;
  state_ = State::kHead;
}

void SrunOutput::release_cut(std::string& out) {
  if (cut_label_.empty()) return;
  cut_label_.clear();
  out.push_back('\n');
  end_line();
}

void SrunOutput::take(char c, std::string& out) {
  if (state_ == State::kHead) {
    if (c == '\n') {  // a line of blanks or digits only: not a label
      release_cut(out);
      end_head(out, false);
    } else {
      head_.push_back(c);
      const Head h = classify_head(head_);
      if (h == Head::kMaybe) return;
      if (h == Head::kLabel && !cut_label_.empty() && head_ == cut_label_) {
        // The same task's line goes on after srun's cut: no newline, no label.
        cut_label_.clear();
        head_.clear();
        piece_ = 0;
        state_ = State::kBody;
        return;
      }
      release_cut(out);
      if (h == Head::kLabel) {
        end_head(out, true);
        return;
      }
      head_.pop_back();
      end_head(out, false);
    }
  }
  if (c == '\n' && strip_labels_ && labelled_ && piece_ == kSrunPiece) {
    cut_label_ = label_;  // srun's cut, most likely: held until the next line's label says
    state_ = State::kHead;
    return;
  }
  out.push_back(c);
  if (c == '\n') {
    end_line();
    return;
  }
  ++piece_;
  if (line_.size() < max_line_)
    line_.push_back(c);
  else
    too_long_ = true;
}

std::string SrunOutput::feed(std::string_view data) {
  std::string out;
  out.reserve(data.size());
  for (char c : data) take(c, out);
  return out;
}

std::string SrunOutput::finish() {
  std::string out;
  release_cut(out);
  if (state_ == State::kHead && !head_.empty()) end_head(out, false);
  if (state_ == State::kBody) end_line();
  return out;
}

}  // namespace dtlaunch::job
