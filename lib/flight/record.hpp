// A flight-record file (docs/ddp.md, "The flight recorder"): the header saying who wrote it, when
// and why, then the collectives the rank's ring held, oldest first. The one writer and the one
// reader of the format: the DDP runtime writes through it, `dtlaunch trace` reads through it.
// Pure: text in and out, a one-line error from the reader; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flight/collective.hpp"

namespace dtlaunch::flight {

// The version the writer writes. 1 had no version, run id or clock offsets.
inline constexpr int kFormatVersion = 2;

// The largest world size a file may claim: `dtlaunch trace` keeps a few hundred bytes per rank,
// and a corrupt header must not make it allocate gigabytes.
inline constexpr int kMaxWorldSize = 1'000'000;

struct Header {
  int version = kFormatVersion;
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
  std::optional<int64_t> clock_error_us;   // the offset's bound; none: not measured
  uint64_t collectives_started = 0;
  std::optional<uint64_t> entries_capacity;  // the ring's size (none in version 1)
};

struct Record {
  Header header;
  std::vector<Collective> entries;  // ascending seq
};

// The writer, in pieces so that a long ring is written a piece at a time: record_head, then
// record_entry for each entry (`first` for the first), then kRecordEnd.
std::string record_head(const Header& h);
std::string record_entry(const Collective& c, bool first);
inline constexpr std::string_view kRecordEnd = "\n ]}\n";
// The whole file at once.
std::string record_text(const Record& r);

// Parses a whole file; nullopt and `error` ("truncated at byte 812", "byte 40: expected ':'")
// when it is not a complete flight record.
std::optional<Record> parse_record(std::string_view text, std::string* error);
// The header alone, from the file's first bytes (it ends where "entries" begins).
std::optional<Header> parse_header(std::string_view head, std::string* error);

}  // namespace dtlaunch::flight
