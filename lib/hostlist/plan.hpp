// The parsed form of a hostlist expression: tokens, their bracket groups and range items, all as
// views into the expression. Parsing checks everything that does not depend on neighbouring
// tokens; the walk (walk.hpp) then produces Slurm's sequence of pushed ranges from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "hostlist/hostlist.hpp"

namespace dtlaunch::hostlist::detail {

// Slurm's limits (src/common/hostlist.c, hostlist.h).
inline constexpr std::uint64_t kMaxRange = 65536;        // hosts in one range item
inline constexpr std::uint64_t kMaxPrefixCount = 65536;  // values of one non-final group
inline constexpr std::size_t kMaxItems = 262144;         // items in one group

struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t width = 0;  // zero padding: the length of the low bound as written
};

struct Group {
  std::size_t first_range = 0;
  std::size_t range_count = 0;
  std::uint64_t values = 0;       // number of values, saturating
  std::uint64_t value_chars = 0;  // printed length of all values, saturating
  std::string_view text_after;    // literal text between this group's ']' and the next group
};

struct Token {
  std::size_t offset = 0;    // in the expression, for messages
  std::string_view head;     // literal text before the first group; the whole name if literal
  bool literal = false;      // no bracket: one host
  std::size_t digits = 0;    // literal: length of its trailing number (0: none)
  std::uint64_t number = 0;  // literal: value of that number
  std::size_t first_group = 0;
  std::size_t prefix_groups = 0;  // groups before the final one, left to right, then the final
  std::string_view suffix;        // text after the final group (Syntax::kCurrent only)
  std::uint64_t hosts = 0;
};

struct Plan {
  std::string_view expr;
  std::vector<Token> tokens;
  std::vector<Group> groups;
  std::vector<Range> ranges;
  std::uint64_t hosts = 0;
  std::uint64_t chars = 0;  // bytes of all names before Slurm's prefix joining, saturating
};

// Parses and checks an expression; throws ParseError. The plan refers into expr.
Plan parse(std::string_view expr, Syntax syntax);

}  // namespace dtlaunch::hostlist::detail
