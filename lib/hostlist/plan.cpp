// Parsing follows Slurm's _next_tok, _hostlist_create_bracketed, _push_range_list and
// _parse_single_range (src/common/hostlist.c); docs/hostlist.md states the rules in words.
#include "hostlist/plan.hpp"

#include <algorithm>
#include <string>

#include "hostlist/text.hpp"

namespace dtlaunch::hostlist::detail {
namespace {

constexpr std::size_t npos = std::string_view::npos;

using u128 = unsigned __int128;

std::uint64_t saturate(u128 v) {
  return v > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(v);
}

// First occurrence of one character at or after a position, for queries whose positions never go
// down. Slurm's tokenizer searches for '[' and ']' from the token start to the end of the whole
// string each time; remembering the last answer keeps that linear instead of quadratic.
class Finder {
 public:
  Finder(std::string_view s, char c) : s_(s), c_(c) {}
  std::size_t next(std::size_t from) {
    if (from < from_ || from > found_) {
      from_ = from;
      found_ = s_.find(c_, from);
    }
    return found_;
  }

 private:
  std::string_view s_;
  char c_;
  std::size_t from_ = npos;
  std::size_t found_ = 0;
};

// strtoul(text + from, &end, 10) on text[from, to): blanks, an optional sign, digits.
struct Scanned {
  bool converted = false;
  bool overflow = false;
  std::uint64_t value = 0;
  std::size_t end = 0;        // one past the last digit (== from when nothing converted)
  std::size_t digits_at = 0;  // where digits were expected
};

Scanned scan_number(std::string_view text, std::size_t from, std::size_t to) {
  Scanned r;
  std::size_t i = from;
  while (i < to && is_space(text[i])) ++i;
  bool negative = false;
  if (i < to && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  r.digits_at = i;
  for (; i < to && is_digit(text[i]); ++i) {
    const auto d = static_cast<std::uint64_t>(text[i] - '0');
    if (r.value > (kMaxNumber - d) / 10) r.overflow = true;
    r.value = r.value * 10 + d;
  }
  if (i == r.digits_at) {
    r.end = from;
    return r;
  }
  r.converted = true;
  r.end = i;
  if (negative) r.value = 0 - r.value;  // strtoul negates in unsigned arithmetic
  return r;
}

class Parser {
 public:
  Parser(std::string_view expr, Syntax syntax, Plan& plan)
      : expr_(expr), syntax_(syntax), plan_(plan) {}

  void run();

 private:
  bool is_separator(char c) const {
    return c == ',' || c == ' ' || c == '\t' || (c == '\n' && syntax_ == Syntax::kCurrent);
  }
  void token(std::size_t begin, std::size_t end);
  void literal(Token& t);
  Range item(std::size_t begin, std::size_t end);
  Group group(std::size_t begin, std::size_t end, bool is_prefix);
  [[noreturn]] void fail(std::size_t at, Reason reason, const std::string& what) const {
    detail::fail(expr_, at, reason, what);
  }

  std::string_view expr_;
  Syntax syntax_;
  Plan& plan_;
  std::vector<Group> scratch_;  // reused by every token
};

void Parser::run() {
  if (const std::size_t nul = expr_.find('\0'); nul != npos)
    fail(nul, Reason::kNulByte, "NUL byte");
  Finder open(expr_, '[');
  Finder close(expr_, ']');
  const std::size_t n = expr_.size();
  std::size_t pos = 0;
  while (true) {
    while (pos < n && is_separator(expr_[pos])) ++pos;
    if (pos == n) break;
    const std::size_t begin = pos;
    std::size_t scan = begin;  // brackets before scan are already paired
    std::size_t end = begin;
    bool extended = true;
    while (extended) {
      while (end < n && !is_separator(expr_[end])) ++end;
      // A separator between a '[' and the first ']' after it does not end the token.
      extended = false;
      while (true) {
        const std::size_t o = open.next(scan);
        if (o == npos || o > end) break;
        const std::size_t c = close.next(scan);
        if (c == npos || c < o) break;
        if (c < end) {
          scan = c + 1;
          continue;
        }
        end = c;
        extended = true;
        break;
      }
    }
    token(begin, end);
    pos = end;
  }
}

void Parser::literal(Token& t) {
  t.literal = true;
  std::size_t d = t.head.size();
  while (d > 0 && is_digit(t.head[d - 1])) --d;
  t.digits = t.head.size() - d;
  if (t.digits > 0) {
    const Scanned s = scan_number(t.head, d, t.head.size());
    if (s.overflow)
      fail(t.offset + d, Reason::kNumberTooLarge,
           "number above 18446744073709551615 (Slurm 22.05 silently changes it)");
    t.number = s.value;
  }
  t.hosts = 1;
}

Range Parser::item(std::size_t begin, std::size_t end) {
  const std::string_view text = expr_;
  const std::string_view s = text.substr(begin, end - begin);
  if (const std::size_t x = s.find('x'); x != npos)
    fail(begin + x, Reason::kBadRange,
         "'x' in a range (multi-dimensional boxes are not supported)");
  const std::size_t dash_rel = s.find('-');
  const std::size_t dash = dash_rel == npos ? npos : begin + dash_rel;
  if (dash != npos && dash + 1 < end && text[dash + 1] == '-')
    fail(dash + 1, Reason::kBadRange, "negative number in a range");
  const std::size_t lo_end = dash == npos ? end : dash;
  Range r;
  r.width = lo_end - begin;
  const Scanned lo = scan_number(text, begin, lo_end);
  if (!lo.converted) {
    if (begin == end) fail(begin, Reason::kBadRange, "empty range");
    if (begin == lo_end) fail(begin, Reason::kBadRange, "range without a first number");
    fail(lo.digits_at, Reason::kBadRange, "a range must be a number or two numbers joined by '-'");
  }
  if (lo.overflow)
    fail(lo.digits_at, Reason::kNumberTooLarge,
         "number above 18446744073709551615 (Slurm 22.05 silently clamps it)");
  r.lo = lo.value;
  if (dash != npos && dash + 1 < end) {
    const Scanned hi = scan_number(text, dash + 1, end);
    if (!hi.converted)
      fail(hi.digits_at, Reason::kBadRange,
           "a range must be a number or two numbers joined by '-'");
    if (hi.overflow)
      fail(hi.digits_at, Reason::kNumberTooLarge,
           "number above 18446744073709551615 (Slurm 22.05 silently clamps it)");
    if (hi.end != end)
      fail(hi.end, Reason::kBadRange, "unexpected character after the last number of a range");
    r.hi = hi.value;
  } else {
    // Slurm ignores junk after the first number only when a second number follows.
    if (lo.end != lo_end)
      fail(lo.end, Reason::kBadRange, "unexpected character after the number of a range");
    r.hi = r.lo;
  }
  if (r.lo > r.hi) fail(begin, Reason::kBadRange, "descending range");
  if (r.hi - r.lo >= kMaxRange)
    fail(begin, Reason::kRangeTooLarge, "range of more than 65536 hosts (Slurm's limit)");
  return r;
}

Group Parser::group(std::size_t begin, std::size_t end, bool is_prefix) {
  Group g;
  g.first_range = plan_.ranges.size();
  u128 values = 0;
  u128 chars = 0;
  std::size_t at = begin;
  while (true) {
    // Search the group only: a search to the next comma of the whole expression would make
    // a comma-free list of many groups quadratic.
    const std::size_t rel = expr_.substr(at, end - at).find(',');
    const std::size_t comma = rel == npos ? end : at + rel;
    if (plan_.ranges.size() - g.first_range == kMaxItems)
      fail(at, Reason::kTooManyItems, "more than 262144 ranges in one bracket");
    const Range r = item(at, comma);
    plan_.ranges.push_back(r);
    values += r.hi - r.lo + 1;
    chars += printed_length_sum(r.lo, r.hi, r.width);
    if (comma == end) break;
    at = comma + 1;
  }
  g.range_count = plan_.ranges.size() - g.first_range;
  if (is_prefix)
    for (std::size_t r = g.first_range; r < plan_.ranges.size(); ++r)
      if (plan_.ranges[r].hi == kMaxNumber)
        fail(begin - 1, Reason::kMaxNumberRange,
             "bracket before the last one reaches 18446744073709551615 (Slurm 22.05 loops "
             "forever on it)");
  if (is_prefix && values > kMaxPrefixCount)
    fail(begin - 1, Reason::kTooManyPrefixes,
         "bracket before the last one has more than 65536 values (Slurm's limit)");
  g.values = saturate(values);
  g.value_chars = saturate(chars);
  return g;
}

void Parser::token(std::size_t begin, std::size_t end) {
  Token t;
  t.offset = begin;
  const std::string_view tok = expr_.substr(begin, end - begin);
  const std::size_t open = tok.rfind('[');
  if (open == npos) {
    t.head = tok;
    literal(t);
  } else {
    const std::size_t close = tok.find(']', open);
    if (close == npos) fail(begin + open, Reason::kUnclosedBracket, "'[' without a matching ']'");
    t.suffix = tok.substr(close + 1);
    if (!t.suffix.empty() && syntax_ == Syntax::kSlurm2205)
      fail(begin + close + 1, Reason::kSuffix,
           "text after the last ']' (a suffix needs Slurm 23.02.5 or later)");
    std::vector<Group>& groups = scratch_;  // right to left: final group first
    groups.clear();
    groups.push_back(group(begin + open + 1, begin + close, false));

    // Groups in the prefix, found from the right as Slurm does: the last '[' and the last ']'
    // after it. Slurm parses the one next to the final group for every host and reports its
    // errors; it silently drops the errors of the groups further left (a 22.05 bug).
    std::string_view before = tok.substr(0, open);
    while (true) {
      const std::size_t p = before.rfind('[');
      const std::size_t q = before.rfind(']');
      if (p == npos || q == npos || q < p) break;
      const std::size_t abs = begin + p + 1;
      const std::string_view text_after = before.substr(q + 1);
      if (groups.size() == 1) {
        groups.push_back(group(abs, begin + q, true));
      } else {
        try {
          groups.push_back(group(abs, begin + q, true));
        } catch (const ParseError& e) {
          throw ParseError(Reason::kIgnoredGroupError, e.offset(),
                           std::string(e.what()) + " (Slurm 22.05 ignores it and drops hosts)");
        }
      }
      groups.back().text_after = text_after;
      before = before.substr(0, p);
    }
    t.head = before;
    t.first_group = plan_.groups.size();
    t.prefix_groups = groups.size() - 1;
    for (std::size_t i = groups.size(); i > 1; --i) plan_.groups.push_back(groups[i - 1]);
    plan_.groups.push_back(groups[0]);

    u128 hosts = 1;
    for (const Group& g : groups) hosts = std::min<u128>(hosts * g.values, u128{kMaxHosts} + 1);
    t.hosts = static_cast<std::uint64_t>(hosts);
  }
  if (t.hosts > kMaxHosts - plan_.hosts)
    fail(begin, Reason::kTooManyHosts,
         "expands to more than " + std::to_string(kMaxHosts) + " hosts (dtlaunch's limit)");
  // Exact length of all names of the token: each group's values appear hosts/values times.
  u128 chars = 0;
  if (t.literal) {
    chars = t.head.size();
  } else {
    chars = u128{t.hosts} * (t.head.size() + t.suffix.size());
    for (std::size_t i = 0; i <= t.prefix_groups; ++i) {
      const Group& g = plan_.groups[t.first_group + i];
      chars += u128{t.hosts} * g.text_after.size() + u128{g.value_chars} * (t.hosts / g.values);
    }
  }
  if (chars > kMaxChars - plan_.chars)
    fail(
        begin, Reason::kTooManyHosts,
        "expands to more than " + std::to_string(kMaxChars) + " bytes of names (dtlaunch's limit)");
  plan_.hosts += t.hosts;
  plan_.chars += static_cast<std::uint64_t>(chars);
  plan_.tokens.push_back(t);
}

}  // namespace

Plan parse(std::string_view expr, Syntax syntax) {
  Plan plan;
  plan.expr = expr;
  Parser(expr, syntax, plan).run();
  return plan;
}

}  // namespace dtlaunch::hostlist::detail
