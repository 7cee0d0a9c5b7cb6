// The flight record's one writer and one reader (lib/flight): what the writer writes reads back
// as it was, and writes again byte for byte; the format as docs/ddp.md shows it; what the reader
// refuses.
#include <string>
#include <vector>

#include "dtlaunch_catch.hpp"
#include "flight/record.hpp"

using namespace dtlaunch::flight;

namespace {

Collective collective(uint64_t seq, Op op, const char* dtype, int64_t numel,
                      std::vector<int64_t> shape, int root, State state) {
  Collective c;
  c.seq = seq;
  c.op = op;
  c.dtype = dtype;
  c.numel = numel;
  c.root = root;
  c.state = state;
  if (shape.size() <= static_cast<size_t>(kMaxShapeDims)) {
    c.dims = static_cast<int8_t>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) c.shape[d] = shape[d];
  }
  c.enqueue_us = 1'796'192'263'869'169 + static_cast<int64_t>(seq) * 1000;
  c.start_us = state == State::kStarted ? 0 : c.enqueue_us + 5;
  c.end_us = state == State::kCompleted ? c.enqueue_us + 900 : 0;
  return c;
}

Header header(const std::string& run_id, const std::string& host, const std::string& reason) {
  return Header{.run_id = run_id,
                .attempt = 2,
                .rank = 3,
                .world_size = 8,
                .local_rank = 1,
                .host = host,
                .kind = "error",
                .reason = reason,
                .dumped_at_us = 1'796'192'266'066'372,
                .clock_offset_us = -38,
                .clock_error_us = 70,
                .collectives_started = 9,
                .entries_capacity = 2000};
}

void check_same(const Collective& a, const Collective& b) {
  CHECK(a.seq == b.seq);
  CHECK(a.op == b.op);
  CHECK(std::string(a.dtype) == b.dtype);
  CHECK(a.numel == b.numel);
  CHECK(a.dims == b.dims);
  CHECK(a.shape == b.shape);
  CHECK(a.root == b.root);
  CHECK(a.enqueue_us == b.enqueue_us);
  CHECK(a.start_us == b.start_us);
  CHECK(a.end_us == b.end_us);
  CHECK(a.state == b.state);
}

void check_same(const Header& a, const Header& b) {
  CHECK(a.version == kFormatVersion);
  CHECK(a.run_id == b.run_id);
  CHECK(a.attempt == b.attempt);
  CHECK(a.rank == b.rank);
  CHECK(a.world_size == b.world_size);
  CHECK(a.local_rank == b.local_rank);
  CHECK(a.host == b.host);
  CHECK(a.kind == b.kind);
  CHECK(a.reason == b.reason);
  CHECK(a.dumped_at_us == b.dumped_at_us);
  CHECK(a.clock_offset_us == b.clock_offset_us);
  CHECK(a.clock_error_us == b.clock_error_us);
  CHECK(a.collectives_started == b.collectives_started);
  CHECK(a.entries_capacity == b.entries_capacity);
}

}  // namespace

TEST_CASE("flight: what the writer writes, the reader reads back, and it writes the same again") {
  struct Case {
    const char* what;
    Header header;
    std::vector<Collective> entries;
  };
  Header unaligned = header("slurm-77.0", "node1", "exit");
  unaligned.clock_offset_us.reset();
  unaligned.clock_error_us.reset();
  unaligned.kind = "exit";
  Header old_ring = header("t1796192263869", "node2", "SIGUSR2");
  old_ring.entries_capacity.reset();
  const Case cases[] = {
      {"no entries", header("run", "vm", "on demand"), {}},
      {"every kind of collective",
       header("local-demo", "vm", "dtlaunch ddp: all_reduce #4 timed out"),
       {collective(1, Op::kBarrier, "", 0, {}, -1, State::kCompleted),
        collective(2, Op::kAllReduce, "float32", 4, {4}, -1, State::kCompleted),
        collective(3, Op::kBroadcast, "bfloat16", 6, {2, 3}, 0, State::kCompleted),
        collective(4, Op::kAllGather, "int64", 1, {}, -1, State::kFailed),
        collective(7, Op::kAllReduce, "ComplexFloat", 120, {2, 3, 4, 5, 1}, -1, State::kStarted)}},
      {"a shape of four dimensions, a scalar's and an unknown one",
       header("run", "vm", "request"),
       {collective(1, Op::kAllReduce, "float16", 24, {1, 2, 3, 4}, -1, State::kCompleted),
        collective(2, Op::kAllReduce, "float64", 1, {}, -1, State::kCompleted),
        collective(3, Op::kAllReduce, "uint8", 32, {1, 2, 2, 2, 2, 2}, -1, State::kCompleted)}},
      {"quotes, newlines, a NUL and bytes that are not UTF-8 in the strings",
       header(std::string("run \"q\"\n\x01", 9), std::string("h\0st", 4),
              "why \xff\xfe caf\xc3\xa9"),
       {collective(1, Op::kBarrier, "", 0, {}, -1, State::kFailed)}},
      {"clocks not aligned", unaligned, {}},
      {"no ring size", old_ring, {collective(5, Op::kBarrier, "", 0, {}, -1, State::kStarted)}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string text = record_text({c.header, c.entries});
    std::string error;
    const auto read = parse_record(text, &error);
    INFO(error);
    REQUIRE(read);
    check_same(read->header, c.header);
    REQUIRE(read->entries.size() == c.entries.size());
    for (size_t i = 0; i < c.entries.size(); ++i) check_same(read->entries[i], c.entries[i]);
    CHECK(record_text(*read) == text);
    // The header alone, from the file's first bytes.
    const auto head = parse_header(record_head(c.header), &error);
    REQUIRE(head);
    check_same(*head, c.header);
  }
}

TEST_CASE("flight: the format as docs/ddp.md shows it") {
  Header h = header("local-demo", "vm", "dtlaunch ddp: all_reduce #4 (float32, 4 elements)");
  h.attempt = 0;
  h.rank = 0;
  h.world_size = 3;
  h.local_rank = 0;
  h.clock_offset_us = 0;
  h.clock_error_us = 0;
  h.collectives_started = 4;
  Collective done = collective(3, Op::kAllReduce, "float32", 4, {4}, -1, State::kCompleted);
  done.enqueue_us = done.start_us = 1796192263869169;
  done.end_us = 1796192263873016;
  Collective gather = collective(4, Op::kAllGather, "int8", 80, {1, 2, 3, 4, 5}, 2, State::kFailed);
  CHECK(record_text({h, {done, gather}}) ==
        "{\"format\": \"dtlaunch-flight-record\", \"version\": 2, \"run_id\": \"local-demo\", "
        "\"attempt\": 0, \"rank\": 0, \"world_size\": 3, \"local_rank\": 0, \"host\": \"vm\", "
        "\"kind\": \"error\", \"reason\": \"dtlaunch ddp: all_reduce #4 (float32, 4 elements)\", "
        "\"dumped_at_us\": 1796192266066372, \"clock_offset_us\": 0, \"clock_error_us\": 0, "
        "\"collectives_started\": 4, \"entries_capacity\": 2000,\n"
        " \"entries\": [\n"
        "  {\"seq\": 3, \"op\": \"all_reduce\", \"dtype\": \"float32\", \"numel\": 4, \"shape\": "
        "[4], \"root\": -1, \"enqueue_us\": 1796192263869169, \"start_us\": 1796192263869169, "
        "\"end_us\": 1796192263873016, \"state\": \"completed\"},\n"
        "  {\"seq\": 4, \"op\": \"all_gather\", \"dtype\": \"int8\", \"numel\": 80, \"shape\": "
        "null, \"root\": 2, \"enqueue_us\": 1796192263873169, \"start_us\": 1796192263873174, "
        "\"end_us\": 0, \"state\": \"failed\"}\n"
        " ]}\n");
  CHECK(signature_text(done) == "all_reduce (float32, [4])");
  CHECK(signature_text(gather) == "all_gather (int8, 80 elements, root 2)");
  CHECK(signature_text(collective(1, Op::kBarrier, "", 0, {}, -1, State::kStarted)) == "barrier");
}

TEST_CASE("flight: the reader refuses what the runtime never writes, naming the byte") {
  const std::string good =
      record_text({header("run", "vm", "why"),
                   {collective(1, Op::kAllReduce, "float32", 4, {4}, -1, State::kCompleted),
                    collective(2, Op::kAllReduce, "float32", 4, {4}, -1, State::kStarted)}});
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  struct Case {
    std::string text, error;
  };
  const Case cases[] = {
      {replaced("dtlaunch-flight-record", "something-else"), "not a dtlaunch flight record"},
      {replaced("\"op\": \"all_reduce\"", "\"op\": \"reduce_scatter\""),
       "an entry's op is not all_reduce, broadcast, all_gather or barrier"},
      {replaced("\"state\": \"completed\"", "\"state\": \"done\""),
       "an entry's state is not started, completed or failed"},
      {replaced("\"dtype\": \"float32\"", "\"dtype\": \"" + std::string(65, 'f') + "\""),
       "an entry's dtype is too long"},
      {replaced("\"seq\": 1, ", ""), "an entry without seq"},
      {replaced("\"seq\": 2", "\"seq\": 1"), "entries are not in ascending seq"},
      {replaced("\n ]}\n", "\n ], \"host\": \"x\"}\n"), "a key after the entries"},
      {good + "{}", "text after the record"},
      {good.substr(0, good.size() / 2), "truncated at byte " + std::to_string(good.size() / 2)},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    std::string error;
    CHECK_FALSE(parse_record(c.text, &error));
    CHECK_THAT(error, dtlaunch_test::contains_text(c.error));
  }
  Header beyond = header("run", "vm", "why");
  beyond.rank = 8;
  std::string error;
  CHECK_FALSE(parse_header(record_head(beyond), &error));
  CHECK_THAT(error, dtlaunch_test::contains_text("rank is not below world_size"));
}

TEST_CASE("flight: a file of version 1 reads with its start as the entry's enqueue time") {
  const std::string v1 =
      "{\"rank\": 0, \"world_size\": 2, \"host\": \"vm\", \"kind\": \"exit\", \"entries\": [\n"
      "  {\"seq\": 1, \"op\": \"barrier\", \"dtype\": \"\", \"numel\": 0, \"shape\": null, "
      "\"root\": -1, \"start_us\": 500, \"end_us\": 900, \"state\": \"completed\"}\n ]}\n";
  std::string error;
  const auto f = parse_record(v1, &error);
  INFO(error);
  REQUIRE(f);
  CHECK(f->header.version == 1);
  CHECK_FALSE(f->header.clock_offset_us);
  REQUIRE(f->entries.size() == 1);
  CHECK(f->entries[0].enqueue_us == 500);
  CHECK_FALSE(f->entries[0].has_tensor());
  CHECK(intern_dtype("float32") == intern_dtype(std::string("float") + "32"));
}
