#include "flight/record.hpp"

#include "core/text.hpp"
#include "flight/json_reader.hpp"

namespace dtlaunch::flight {
namespace {

// The one spelling of the format's tag: the writer's first key, the reader's check.
constexpr std::string_view kFormatTag = "dtlaunch-flight-record";

std::string number_or_null(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "null";
}

std::string shape_json(const Collective& c) {
  if (!c.shape_known()) return "null";
  std::string out = "[";
  for (int d = 0; d < c.dims; ++d) out += (d ? ", " : "") + std::to_string(c.shape[d]);
  return out + "]";
}

}  // namespace

std::string record_head(const Header& h) {
  std::string out =
      "{\"format\": " + core::json_quote(kFormatTag) +
      ", \"version\": " + std::to_string(kFormatVersion) +
      ", \"run_id\": " + core::json_quote(h.run_id) +
      ", \"attempt\": " + std::to_string(h.attempt) + ", \"rank\": " + std::to_string(h.rank) +
      ", \"world_size\": " + std::to_string(h.world_size) +
      ", \"local_rank\": " + std::to_string(h.local_rank) +
      ", \"host\": " + core::json_quote(h.host) + ", \"kind\": " + core::json_quote(h.kind) +
      ", \"reason\": " + core::json_quote(h.reason) +
      ", \"dumped_at_us\": " + std::to_string(h.dumped_at_us) +
      ", \"clock_offset_us\": " + number_or_null(h.clock_offset_us) +
      ", \"clock_error_us\": " + number_or_null(h.clock_error_us) +
      ", \"collectives_started\": " + std::to_string(h.collectives_started);
  if (h.entries_capacity) out += ", \"entries_capacity\": " + std::to_string(*h.entries_capacity);
  return out + ",\n \"entries\": [";
}

std::string record_entry(const Collective& c, bool first) {
  return std::string(first ? "\n" : ",\n") + "  {\"seq\": " + std::to_string(c.seq) +
         ", \"op\": \"" + op_name(c.op) + "\", \"dtype\": " + core::json_quote(c.dtype) +
         ", \"numel\": " + std::to_string(c.numel) + ", \"shape\": " + shape_json(c) +
         ", \"root\": " + std::to_string(c.root) +
         ", \"enqueue_us\": " + std::to_string(c.enqueue_us) +
         ", \"start_us\": " + std::to_string(c.start_us) +
         ", \"end_us\": " + std::to_string(c.end_us) + ", \"state\": \"" + state_name(c.state) +
         "\"}";
}

std::string record_text(const Record& r) {
  std::string out = record_head(r.header);
  for (size_t i = 0; i < r.entries.size(); ++i) out += record_entry(r.entries[i], i == 0);
  out += kRecordEnd;
  return out;
}

namespace {

bool header_key(JsonReader& p, const std::string& key, Header& h) {
  if (key == "format") {
    std::string f;
    if (!p.string(f)) return false;
    return f == kFormatTag || p.fail("not a dtlaunch flight record");
  }
  if (key == "version") return p.bounded(h.version, 1, 1000);
  if (key == "run_id") return p.string(h.run_id);
  if (key == "attempt") return p.bounded(h.attempt, 0, 1'000'000'000);
  if (key == "rank") return p.bounded(h.rank, 0, 1'000'000'000);
  if (key == "world_size") return p.bounded(h.world_size, 1, kMaxWorldSize);
  if (key == "local_rank") return p.bounded(h.local_rank, -1, 1'000'000'000);
  if (key == "host") return p.string(h.host);
  if (key == "kind") return p.string(h.kind);
  if (key == "reason") return p.string(h.reason);
  if (key == "dumped_at_us") return p.bounded(h.dumped_at_us, 0, INT64_MAX);
  if (key == "clock_offset_us") return p.nullable_integer(h.clock_offset_us);
  if (key == "clock_error_us") return p.nullable_integer(h.clock_error_us);
  if (key == "collectives_started") return p.bounded(h.collectives_started, 0, INT64_MAX);
  if (key == "entries_capacity") {
    uint64_t n = 0;
    if (!p.bounded(n, 0, INT64_MAX)) return false;
    h.entries_capacity = n;
    return true;
  }
  return p.skip_value();
}

// A shape of up to kMaxShapeDims dimensions is kept; a longer one (never written by the
// runtime, which writes null then) is read as unknown, like the runtime's own.
bool shape(JsonReader& p, Collective& c) {
  if (p.literal("null")) return true;
  if (p.failed()) return false;
  int dims = 0;
  const bool ok = p.array([&] {
    int64_t d = 0;
    if (!p.bounded(d, 0, INT64_MAX)) return false;
    if (dims >= 64) return p.fail("too many dimensions");
    if (dims < kMaxShapeDims) c.shape[dims] = d;
    ++dims;
    return true;
  });
  if (!ok) return false;
  c.dims = static_cast<int8_t>(dims <= kMaxShapeDims ? dims : -1);
  return true;
}

// The names of an entry, read as text and checked once the entry is complete.
bool entry_names(JsonReader& p, Collective& c, const std::string& op, const std::string& dtype,
                 const std::string& state) {
  const auto o = op_of(op);
  if (!o) return p.fail("an entry's op is not all_reduce, broadcast, all_gather or barrier");
  c.op = *o;
  const char* name = intern_dtype(dtype);
  if (name == nullptr) return p.fail("an entry's dtype is too long, or one too many");
  c.dtype = name;
  const auto s = state_of(state);
  if (!s) return p.fail("an entry's state is not started, completed or failed");
  c.state = *s;
  return true;
}

bool entry(JsonReader& p, Collective& c) {
  std::string op, dtype, state;
  bool have_seq = false;
  const bool ok = p.object([&](const std::string& key) {
    if (key == "seq") return have_seq = p.bounded(c.seq, 1, INT64_MAX);
    if (key == "op") return p.string(op);
    if (key == "dtype") return p.string(dtype);
    if (key == "numel") return p.bounded(c.numel, 0, INT64_MAX);
    if (key == "root") return p.bounded(c.root, -1, 1'000'000'000);
    if (key == "enqueue_us") return p.bounded(c.enqueue_us, 0, INT64_MAX);
    if (key == "start_us") return p.bounded(c.start_us, 0, INT64_MAX);
    if (key == "end_us") return p.bounded(c.end_us, 0, INT64_MAX);
    if (key == "state") return p.string(state);
    if (key == "shape") return shape(p, c);
    return p.skip_value();
  });
  if (!ok) return false;
  if (!have_seq) return p.fail("an entry without seq");
  if (!entry_names(p, c, op, dtype, state)) return false;
  // Version 1 had start_us only, set when the program called the runtime.
  if (c.enqueue_us == 0) c.enqueue_us = c.start_us;
  return true;
}

bool check_header(JsonReader& p, Header& h) {
  // Files of version 1 (before run ids and clock offsets) had no version key.
  if (h.version == 0) h.version = 1;
  if (h.rank < 0 || h.world_size <= 0) return p.fail("no rank or world_size");
  if (h.rank >= h.world_size) return p.fail("rank is not below world_size");
  return true;
}

// A header as the reader starts it: a version key is looked for, not assumed.
Header unread_header() {
  Header h;
  h.version = 0;
  return h;
}

}  // namespace

std::optional<Record> parse_record(std::string_view text, std::string* error) {
  JsonReader p(text);
  Record f{unread_header(), {}};
  bool saw_entries = false;
  uint64_t last_seq = 0;
  const bool ok = p.object([&](const std::string& key) {
    // The runtime writes the entries last, and parse_header reads the keys before them: a key
    // after the entries (or a second "entries") is not a file the runtime wrote.
    if (saw_entries) return p.fail("a key after the entries");
    if (key != "entries") return header_key(p, key, f.header);
    saw_entries = true;
    return p.array([&] {
      Collective c;
      if (!entry(p, c)) return false;
      if (c.seq <= last_seq) return p.fail("entries are not in ascending seq");
      last_seq = c.seq;
      f.entries.push_back(c);
      return true;
    });
  });
  if (ok) {
    p.ws();
    if (p.pos() != text.size())
      p.fail("text after the record");
    else if (!saw_entries)
      p.fail("no entries");
    else
      check_header(p, f.header);
  }
  if (p.failed()) {
    if (error) *error = p.error();
    return std::nullopt;
  }
  // Version 1 files had no format key.
  return f;
}

std::optional<Header> parse_header(std::string_view head, std::string* error) {
  JsonReader p(head);
  Header h = unread_header();
  bool reached_entries = false;
  p.object([&](const std::string& key) {
    if (key == "entries") {
      reached_entries = true;
      return false;  // stop: the header is complete
    }
    return header_key(p, key, h);
  });
  if (!reached_entries && !p.failed()) p.fail("no entries");
  if (!p.failed()) check_header(p, h);
  if (p.failed()) {
    if (error) *error = p.error();
    return std::nullopt;
  }
  return h;
}

}  // namespace dtlaunch::flight
