#include "trace/timeline.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/text.hpp"

namespace dtlaunch::trace {
namespace {

// Each line through excerpt (no terminal or markup bytes), then the HTML specials.
std::string html_escape(std::string_view text) {
  std::string safe;
  for (size_t from = 0; from <= text.size();) {
    const size_t nl = std::min(text.find('\n', from), text.size());
    safe += core::excerpt(text.substr(from, nl - from), 4000, core::Quote::kNone);
    if (nl < text.size()) safe += '\n';
    from = nl + 1;
  }
  std::string out;
  for (char c : safe) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string rank_label(const Findings& v, size_t r) {
  const RankSummary& rs = v.ranks[r];
  return "rank " + std::to_string(r) + (rs.present ? " (" + rs.host + ")" : "");
}

}  // namespace

int64_t time_origin_us(const Findings& v) {
  int64_t t0 = INT64_MAX;
  for (const auto& [seq, last] : v.last_entered) t0 = std::min(t0, last.first);
  for (const auto& r : v.ranks)
    if (r.present && r.last.enqueue_us > 0) t0 = std::min(t0, r.dumped_at_us);
  return t0 == INT64_MAX ? 0 : t0;
}

std::string chrome_begin(const Findings& v) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": " +
         core::json_quote("dtlaunch run " + v.run_id + " attempt " + std::to_string(v.attempt)) +
         "}}";
  for (size_t r = 0; r < v.ranks.size(); ++r) {
    std::string name = rank_label(v, r);
    if (!v.ranks[r].present) name += " MISSING (no file)";
    for (const auto& s : v.stragglers)
      if (s.rank == static_cast<int>(r)) name += " STRAGGLER";
    out +=
        ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": " + std::to_string(r) +
        ", \"args\": {\"name\": " + core::json_quote(name) + "}}";
    out += ",\n{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": 0, \"tid\": " +
           std::to_string(r) + ", \"args\": {\"sort_index\": " + std::to_string(r) + "}}";
  }
  return out;
}

std::string chrome_rank(const Findings& v, const RankFile& f, int64_t t0_us, bool) {
  std::string out;
  const int64_t offset = f.header.clock_offset_us.value_or(0);
  const int64_t dumped = f.header.dumped_at_us + offset;
  const std::string tid = std::to_string(f.header.rank);
  for (const Entry& e : f.entries) {
    if (e.enqueue_us == 0) continue;
    const int64_t begin = e.enqueue_us + offset;
    const int64_t end = e.end_us > 0 ? e.end_us + offset : std::max(begin, dumped);
    const char* state = e.state == EntryState::kCompleted ? "completed"
                        : e.state == EntryState::kFailed  ? "failed"
                                                          : "in flight at the dump";
    out += ",\n{\"ph\": \"X\", \"pid\": 0, \"tid\": " + tid + ", \"name\": " +
           core::json_quote(std::string(flight::op_name(e.op)) + " #" + std::to_string(e.seq)) +
           ", \"cat\": \"collective\", \"ts\": " + std::to_string(begin - t0_us) +
           ", \"dur\": " + std::to_string(end - begin) +
           ", \"args\": {\"signature\": " + core::json_quote(signature_text(e)) +
           ", \"state\": \"" + state + "\"}}";
    auto last = v.last_entered.find(e.seq);
    if (last != v.last_entered.end() && last->second.first > begin &&
        last->second.second != f.header.rank) {
      const int64_t wait_end = std::min(end, last->second.first);
      out +=
          ",\n{\"ph\": \"X\", \"pid\": 0, \"tid\": " + tid + ", \"name\": " +
          core::json_quote("waits for rank " + std::to_string(last->second.second)) +
          ", \"cat\": \"wait\", \"cname\": \"terrible\", \"ts\": " + std::to_string(begin - t0_us) +
          ", \"dur\": " + std::to_string(wait_end - begin) + "}";
    }
  }
  return out;
}

std::string chrome_end(const Findings&) {
  return "\n]}\n";
}

int timeline_row_px(int world_size) {
  return std::clamp(640 / std::max(world_size, 1), 3, 28);
}

std::pair<uint64_t, uint64_t> timeline_window(const Findings& v, uint64_t window) {
  const uint64_t hi =
      v.divergent_seq != 0 ? std::min(v.collectives_seen, v.divergent_seq + 2) : v.collectives_seen;
  return {hi >= window ? hi - window + 1 : 1, hi};
}

Timeline::Timeline(const Findings& v) : v_(v) {
  std::tie(lo_, hi_) = timeline_window(v);
  rows_.resize(v.ranks.size());
  dumped_at_.resize(v.ranks.size(), 0);
}

void Timeline::add(const RankFile& f) {
  const auto r = static_cast<size_t>(f.header.rank);
  if (r >= rows_.size()) return;
  const int64_t offset = f.header.clock_offset_us.value_or(0);
  dumped_at_[r] = f.header.dumped_at_us + offset;
  for (Entry e : f.entries) {
    if (e.seq < lo_ || e.seq > hi_ || e.enqueue_us == 0) continue;
    e.enqueue_us += offset;
    if (e.start_us > 0) e.start_us += offset;
    if (e.end_us > 0) e.end_us += offset;
    rows_[r].push_back(std::move(e));
  }
}

double Timeline::TimeScale::operator()(int64_t t) const {
  return kLabelWidth + kPlotWidth * (static_cast<double>(t) - t0_us) / span_us;
}

std::string Timeline::html(const std::string& verdict_text) const {
  const int rows = static_cast<int>(rows_.size());
  const int row_px = timeline_row_px(rows);
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (size_t r = 0; r < rows_.size(); ++r) {
    for (const Entry& e : rows_[r]) {
      t0 = std::min(t0, e.enqueue_us);
      t1 = std::max(t1, e.end_us > 0 ? e.end_us : std::max(e.enqueue_us, dumped_at_[r]));
    }
  }
  if (t0 == INT64_MAX) t0 = t1 = 0;
  // In double: the times come from files, and a corrupt one may hold any int64.
  const TimeScale x{static_cast<double>(t0),
                    std::max(static_cast<double>(t1) - static_cast<double>(t0), 1.0)};
  const int width = kLabelWidth + kPlotWidth + 20;
  const int height = kTimelineTop + rows * row_px + 40;

  std::string svg = svg_head(width, height, row_px, x.span_us);
  for (int r = 0; r < rows; ++r) svg += svg_row(r, row_px, width, x);
  std::string page = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dtlaunch trace " +
                     html_escape(v_.run_id) +
                     "</title><style>body{margin:0;background:#fff}pre{margin:8px;font-size:13px;"
                     "white-space:pre-wrap}</style></head><body>\n";
  page += svg + "</svg>\n<pre>" + html_escape(verdict_text) + "</pre>\n</body></html>\n";
  return page;
}

// The page's <svg> element opened: background, title, legend and the time axis's caption.
std::string Timeline::svg_head(int width, int height, int row_px, double span_us) const {
  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" data-top=\"" + std::to_string(kTimelineTop) +
         "\" data-row=\"" + std::to_string(row_px) + "\" font-family=\"sans-serif\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" +
         std::to_string(height) + "\" fill=\"#ffffff\"/>\n";
  svg += "<text x=\"10\" y=\"40\" font-size=\"18\" font-weight=\"bold\">dtlaunch trace: run " +
         html_escape(v_.run_id) + " attempt " + std::to_string(v_.attempt) + ", " +
         std::to_string(v_.ranks.size() - v_.missing().size()) + " of " +
         std::to_string(v_.world_size) + " ranks</text>\n";
  auto legend = [&](int lx, const char* colour, const char* text) {
    svg += "<rect x=\"" + std::to_string(lx) + "\" y=\"" + std::to_string(kTimelineTop - 40) +
           "\" width=\"14\" height=\"14\" fill=\"" + colour + "\"/><text x=\"" +
           std::to_string(lx + 18) + "\" y=\"" + std::to_string(kTimelineTop - 28) +
           "\" font-size=\"13\">" + text + "</text>\n";
  };
  legend(kLabelWidth, "#f5a623", "waits for the last rank");
  legend(kLabelWidth + 200, "#3b7dd8", "all ranks in");
  legend(kLabelWidth + 330, "#c62828", "failed / in flight at the dump");
  legend(kLabelWidth + 560, kStragglerColour, "straggler");
  legend(kLabelWidth + 660, kMissingColour, "missing rank");
  svg += "<text x=\"" + std::to_string(kLabelWidth) + "\" y=\"" + std::to_string(kTimelineTop - 8) +
         "\" font-size=\"12\" fill=\"#555\">collectives #" + std::to_string(lo_) + "-#" +
         std::to_string(hi_) + ", " +
         core::duration_text(std::chrono::duration<double, std::micro>(span_us)) +
         ", rank 0's clock</text>\n";
  return svg;
}

// Rank r's track: its band, its marker and label, a bar per collective.
std::string Timeline::svg_row(int r, int row_px, int width, const TimeScale& x) const {
  std::string svg;
  const int y = kTimelineTop + r * row_px;
  const RankSummary& rs = v_.ranks[static_cast<size_t>(r)];
  bool straggler = false;
  for (const auto& s : v_.stragglers) straggler = straggler || s.rank == r;
  const char* band = !rs.present ? "#e0e0e0"
                     : straggler ? "#ffe0e0"
                                 : (r % 2 ? "#f4f4f4" : "#fbfbfb");
  svg += "<rect x=\"" + std::to_string(kMarkerWidth) + "\" y=\"" + std::to_string(y) +
         "\" width=\"" + std::to_string(width - kMarkerWidth) + "\" height=\"" +
         std::to_string(row_px) + "\" fill=\"" + band + "\"/>\n";
  if (straggler || !rs.present)
    svg += "<rect x=\"0\" y=\"" + std::to_string(y) + "\" width=\"" + std::to_string(kMarkerWidth) +
           "\" height=\"" + std::to_string(row_px) + "\" fill=\"" +
           (straggler ? kStragglerColour : kMissingColour) + "\"/>\n";
  if (row_px >= 10) {
    std::string label = rank_label(v_, static_cast<size_t>(r));
    if (!rs.present) label += " MISSING";
    if (straggler) label += " STRAGGLER";
    svg += "<text x=\"" + std::to_string(kMarkerWidth + 4) + "\" y=\"" +
           std::to_string(y + row_px - std::max(2, row_px / 4)) + "\" font-size=\"" +
           std::to_string(std::min(13, row_px - 2)) + "\"" +
           (straggler ? " fill=\"#b00000\" font-weight=\"bold\"" : "") + ">" + html_escape(label) +
           "</text>\n";
  }
  for (const Entry& e : rows_[static_cast<size_t>(r)]) {
    const bool open = e.end_us == 0;
    const int64_t end =
        open ? std::max(e.enqueue_us, dumped_at_[static_cast<size_t>(r)]) : e.end_us;
    auto last = v_.last_entered.find(e.seq);
    const int64_t all_in = last != v_.last_entered.end()
                               ? std::clamp(last->second.first, e.enqueue_us, end)
                               : e.enqueue_us;
    const int pad = row_px >= 8 ? 2 : 0;
    auto bar = [&](int64_t from, int64_t to, const char* colour) {
      const double w = std::max(x(to) - x(from), 1.0);
      svg += "<rect x=\"" + num(x(from)) + "\" y=\"" + std::to_string(y + pad) + "\" width=\"" +
             num(w) + "\" height=\"" + std::to_string(row_px - 2 * pad) + "\" fill=\"" + colour +
             "\"><title>" +
             html_escape(std::string(flight::op_name(e.op)) + " #" + std::to_string(e.seq) + " " +
                         signature_text(e)) +
             "</title></rect>\n";
    };
    if (all_in > e.enqueue_us) bar(e.enqueue_us, all_in, "#f5a623");
    bar(all_in, end, open || e.state == EntryState::kFailed ? "#c62828" : "#3b7dd8");
  }
  return svg;
}

}  // namespace dtlaunch::trace
