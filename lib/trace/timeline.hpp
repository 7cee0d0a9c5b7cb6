// The pictures of `dtlaunch trace`: a Chrome-trace / Perfetto JSON timeline (one track per rank,
// collectives as slices, the wait for the last rank as a nested slice) and a self-contained
// HTML page with an SVG timeline of the last collectives, stragglers and missing ranks marked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/record.hpp"
#include "trace/verdict.hpp"

namespace dtlaunch::trace {

// The Chrome trace is written one rank file at a time: begin, each rank's events, end.
std::string chrome_begin(const Findings& v);
std::string chrome_rank(const Findings& v, const RankFile& f, int64_t t0_us, bool first);
std::string chrome_end(const Findings& v);
int64_t time_origin_us(const Findings& v);  // the earliest entry, rank 0's clock

// The HTML timeline's layout, which the screenshot test reads back: row r's band spans
// [kTimelineTop + r * row_px, kTimelineTop + (r + 1) * row_px), its marker the columns
// [0, kMarkerWidth). A straggler's marker is kStragglerColour, a missing rank's kMissingColour.
inline constexpr int kTimelineTop = 120, kMarkerWidth = 10, kLabelWidth = 220, kPlotWidth = 1000;
inline constexpr const char* kStragglerColour = "#e00000";
inline constexpr const char* kMissingColour = "#808080";
int timeline_row_px(int world_size);
// The collectives the picture shows: the last `window` up to the divergence (or the newest).
std::pair<uint64_t, uint64_t> timeline_window(const Findings& v, uint64_t window = 60);

// Collects the entries of the window, one file at a time, then renders the page.
class Timeline {
 public:
  explicit Timeline(const Findings& v);
  void add(const RankFile& f);
  std::string html(const std::string& verdict_text) const;

 private:
  // x of a time in the plot, in double: a corrupt file's times may be any int64.
  struct TimeScale {
    double t0_us, span_us;
    double operator()(int64_t t) const;
  };
  std::string svg_head(int width, int height, int row_px, double span_us) const;
  std::string svg_row(int r, int row_px, int width, const TimeScale& x) const;

  const Findings& v_;
  uint64_t lo_, hi_;
  std::vector<std::vector<Entry>> rows_;  // per rank, aligned to rank 0's clock
  std::vector<int64_t> dumped_at_;
};

}  // namespace dtlaunch::trace
