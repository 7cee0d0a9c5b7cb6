#include "core/text.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <utility>

namespace dtlaunch::core {

std::size_t utf8_sequence_length(std::string_view text) noexcept {
  if (text.empty()) return 0;
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char min_second = 0x80, max_second = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) min_second = 0xa0;  // overlong
    if (lead == 0xed) max_second = 0x9f;  // UTF-16 surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) min_second = 0x90;  // overlong
    if (lead == 0xf4) max_second = 0x8f;  // above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < min_second || byte(1) > max_second) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  return length;
}

std::string excerpt(std::string_view text, std::size_t max_bytes, Quote quote) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto is_quote = [quote](char c) {
    return (quote == Quote::kSingle && c == '\'') || (quote == Quote::kDouble && c == '"');
  };
  std::string out;
  std::size_t i = 0;
  while (i < text.size() && i < max_bytes) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else if (c == '\\' || is_quote(c)) {
      out.push_back('\\');
      out.push_back(c);
    } else if (u >= 0x80) {
      const std::size_t length = utf8_sequence_length(text.substr(i));
      if (length == 0) {
        out += "\\x";
        out.push_back(kHex[u >> 4]);
        out.push_back(kHex[u & 0xf]);
      } else {
        out.append(text.substr(i, length));
        i += length;
        continue;
      }
    } else {
      out.push_back(c);
    }
    ++i;
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

// JSON text must be UTF-8, but argv and the environment are bytes. Valid UTF-8 is kept; every
// other byte becomes \udcXX, the lone surrogate of Python's "surrogateescape" (PEP 383), so the
// output always parses and json.loads(...).encode("utf-8", "surrogateescape") gives the bytes.
std::string json_quote(std::string_view text) {
  std::string out = "\"";
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    char buf[8];
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else if (std::size_t length = utf8_sequence_length(text.substr(i))) {
          out.append(text.substr(i, length));
          i += length;
          continue;
        } else {
          std::snprintf(buf, sizeof buf, "\\udc%02x", c);
          out += buf;
        }
    }
    ++i;
  }
  return out + "\"";
}

std::string_view first_line(std::string_view text) noexcept {
  return text.substr(0, text.find('\n'));
}

std::string num(std::uint64_t value) {
  return std::to_string(value);
}

std::string duration_text(std::chrono::duration<double> duration) {
  // Whole microseconds first, so that the unit follows the rounded value (999.9996 ms is 1 s).
  const double us = std::round(std::fabs(duration.count()) * 1e6);
  const auto [per_unit, unit] = us >= 1e6   ? std::pair{1e6, " s"}
                                : us >= 1e3 ? std::pair{1e3, " ms"}
                                            : std::pair{1.0, " us"};
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.3f", std::round(us * 1000 / per_unit) / 1000);
  std::string text = digits;
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
  return (duration.count() < 0 && us > 0 ? "-" : "") + text + unit;
}

std::string compact_ranges(std::vector<std::uint32_t> numbers, std::size_t max_ranges) {
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  std::string out;
  std::size_t ranges = 0;
  for (std::size_t i = 0; i < numbers.size(); ++ranges) {
    if (ranges == max_ranges) {
      out += ", ... (" + std::to_string(numbers.size()) + " in all)";
      break;
    }
    std::size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(numbers[i]);
    if (j > i) out += "-" + std::to_string(numbers[j]);
    i = j + 1;
  }
  return out;
}

std::string signal_text(int sig) {
  struct Named {
    int number;
    const char* name;
  };
  static constexpr std::array<Named, 31> kSignals{{
      {SIGHUP, "HUP"},   {SIGINT, "INT"},       {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},
      {SIGTRAP, "TRAP"}, {SIGABRT, "ABRT"},     {SIGBUS, "BUS"},   {SIGFPE, "FPE"},
      {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"}, {SIGUSR2, "USR2"},
      {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},     {SIGTERM, "TERM"}, {SIGSTKFLT, "STKFLT"},
      {SIGCHLD, "CHLD"}, {SIGCONT, "CONT"},     {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"},
      {SIGTTIN, "TTIN"}, {SIGTTOU, "TTOU"},     {SIGURG, "URG"},   {SIGXCPU, "XCPU"},
      {SIGXFSZ, "XFSZ"}, {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"}, {SIGWINCH, "WINCH"},
      {SIGIO, "IO"},     {SIGPWR, "PWR"},       {SIGSYS, "SYS"},
  }};
  for (const Named& s : kSignals)
    if (s.number == sig) return std::string("SIG") + s.name;
  return "signal " + std::to_string(sig);
}

}  // namespace dtlaunch::core
