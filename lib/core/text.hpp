// Quoting what the user gave us back to them. Values come from the environment, files and the
// command line, so they can be megabytes long or hold bytes a terminal would act on: an error
// line quotes a bounded, escaped excerpt, never the raw value.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::core {

// The quote an excerpt is put inside, escaped in it. kNone is its own value, not a character
// ('\0' once meant "no quote" and made a NUL byte the quote, written raw after a backslash).
enum class Quote { kSingle, kDouble, kNone };

// `text` with control characters (a NUL byte as \x00), DEL, backslash and bytes that are not
// valid UTF-8 escaped (\n, \t, \r, \\, \xNN; the quote too, as \' or \"), valid UTF-8 kept as it
// is. Texts longer than max_bytes are cut at a character boundary and end in "... (N bytes)".
std::string excerpt(std::string_view text, std::size_t max_bytes = 80,
                    Quote quote = Quote::kSingle);

// Length of the valid UTF-8 sequence that starts text (1-4), or 0 when it is not one: overlong
// forms, surrogates and code points above U+10FFFF are invalid, as RFC 3629 says.
std::size_t utf8_sequence_length(std::string_view text) noexcept;

// `text` as a JSON string, quotes included. Valid UTF-8 is kept; every other byte becomes \udcXX,
// the lone surrogate of Python's "surrogateescape" (PEP 383): the output always parses, and
// json.loads(...).encode("utf-8", "surrogateescape") gives the bytes back.
std::string json_quote(std::string_view text);

// The first line of `text` (a c10 error's message without its C++ stack trace).
std::string_view first_line(std::string_view text) noexcept;

// An unsigned number in decimal: the one spelling of counts, ranks, ports and sizes in messages.
std::string num(std::uint64_t value);

// "SIGTERM" for a standard signal, "signal 40" for a real-time or unknown one. glibc's
// sigabbrev_np is 2.32's, above the release launcher's glibc floor (scripts/package.sh).
std::string signal_text(int sig);

// The one format of a duration in every message, configured or measured: the number, a space and
// the unit, seconds from 1 s up ("2 s", "1.5 s", "12.347 s"), milliseconds below ("400 ms",
// "1.25 ms"), microseconds below 1 ms ("35 us"); rounded to a thousandth of the unit, trailing
// zeros dropped. Any std::chrono duration converts: duration_text(grace), or
// duration_text(std::chrono::duration<double>(seconds)).
std::string duration_text(std::chrono::duration<double> duration);

// The items joined with `separator`, each through `text` ("a, b, c").
template <typename Items, typename Text>
std::string join(const Items& items, std::string_view separator, Text text) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    first = false;
    out += text(item);
  }
  return out;
}
inline std::string join(const std::vector<std::string>& items, std::string_view separator) {
  return join(items, separator, [](const std::string& item) -> const std::string& { return item; });
}

// Numbers as ranges, "0-3,8,10-11", sorted and each once, whatever the order given. With at most
// max_ranges ranges; more end in ", ... (N in all)", N counting the distinct numbers. The one
// copy for ranks, CPUs and devices (doctor's reports, CpuSet::to_list, the DDP runtime's
// missing ranks).
std::string compact_ranges(std::vector<std::uint32_t> numbers,
                           std::size_t max_ranges = static_cast<std::size_t>(-1));

}  // namespace dtlaunch::core
