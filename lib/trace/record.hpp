// A flight-recorder file of the DDP runtime, as `dtlaunch trace` reads it: lib/flight's record
// and reader (the format's one owner) under the names of the merger and the renderers.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "flight/record.hpp"

namespace dtlaunch::trace {

using flight::kMaxWorldSize;
using Entry = flight::Collective;
using EntryState = flight::State;
using Header = flight::Header;
using RankFile = flight::Record;

inline std::optional<RankFile> parse_rank_file(std::string_view text, std::string* error) {
  return flight::parse_record(text, error);
}
using flight::parse_header;
using flight::shape_text;
using flight::signature_text;

}  // namespace dtlaunch::trace
