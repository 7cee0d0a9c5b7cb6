// A flight-recorder file of the DDP runtime (docs/ddp.md, "The flight recorder"), parsed. Pure:
// text in, values or a one-line error out; no LibTorch, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::trace {

// The largest world size a file may claim: `dtlaunch trace` keeps a few hundred bytes per rank,
// and a corrupt header must not make it allocate gigabytes.
inline constexpr int kMaxWorldSize = 1'000'000;

enum class EntryState : uint8_t { kStarted, kCompleted, kFailed };

struct Entry {
  uint64_t seq = 0;
  std::string op;     // "all_reduce", "broadcast", "all_gather", "barrier"
  std::string dtype;  // "" for a barrier
  int64_t numel = 0;
  std::optional<std::vector<int64_t>> shape;  // none: unknown (more than 4 dimensions, barrier)
  int root = -1;
  int64_t enqueue_us = 0, start_us = 0, end_us = 0;  // this rank's clock; 0: not (yet) there
  EntryState state = EntryState::kStarted;
};

// The first line of a file: who wrote it, when and why.
struct Header {
  int version = 0;
  std::string run_id;
  int attempt = 0;
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  std::string host;
  std::string kind;  // "error", "request", "signal", "exit"
  std::string reason;
  int64_t dumped_at_us = 0;
  std::optional<int64_t> clock_offset_us;  // add to this rank's times for rank 0's clock
  std::optional<int64_t> clock_error_us;
  uint64_t collectives_started = 0;
};

struct RankFile {
  Header header;
  std::vector<Entry> entries;  // ascending seq
};

// Parses a whole file; nullopt and `error` ("truncated at byte 812", "byte 40: expected ':'")
// when it is not a complete flight record.
std::optional<RankFile> parse_rank_file(std::string_view text, std::string* error);
// The header alone, from the file's first bytes (it ends where "entries" begins).
std::optional<Header> parse_header(std::string_view head, std::string* error);

// "all_reduce (float32, [4])", "barrier": what ranks must agree on, for messages.
std::string signature_text(const Entry& e);
std::string shape_text(const Entry& e);  // "[4, 2]", or "4 elements" when the shape is unknown

}  // namespace dtlaunch::trace
