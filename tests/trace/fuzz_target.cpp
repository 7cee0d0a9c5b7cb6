// libFuzzer target: any byte string as a flight-record file, through the parser, the merger and
// every renderer of `dtlaunch trace`. Properties: no crash, no sanitizer report, and a file that
// parses whole has a header that parses alone.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trace/record.hpp"
#include "trace/timeline.hpp"
#include "trace/verdict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtlaunch::trace;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string error;
  const auto header = parse_header(input, &error);
  const auto file = parse_rank_file(input, &error);
  if (!file) return 0;
  if (!header) {
    std::fprintf(stderr, "a whole file parsed, its header alone did not: %s\n", error.c_str());
    std::abort();
  }
  if (file->header.world_size > 4096) return 0;  // per-rank tables: keep each run fast
  Merger merger(file->header.run_id, file->header.attempt, file->header.world_size);
  merger.add("fuzz.json", *file);
  const Findings v = merger.finish();
  (void)render_text(v, "dir");
  (void)render_json(v, "dir");
  Timeline timeline(v);
  timeline.add(*file);
  (void)timeline.html("verdict");
  (void)chrome_rank(v, *file, time_origin_us(v), true);
  return 0;
}
