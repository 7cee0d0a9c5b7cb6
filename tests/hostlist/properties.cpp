#include "properties.hpp"

#include <optional>
#include <vector>

#include "hostlist/hostlist.hpp"

namespace dtlaunch::hostlist::test {
namespace {

constexpr std::uint64_t kLargeExpansion = 256;

bool writable(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (c == ',' || c == '[' || c == ']' || c == '\0' || c == ' ' || c == '\t' || c == '\n' ||
        c == '\v' || c == '\f' || c == '\r')
      return false;
  std::size_t d = name.size();
  while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') --d;
  const std::string_view digits = name.substr(d);
  std::size_t first = 0;
  while (first < digits.size() && digits[first] == '0') ++first;
  const std::string_view significant = digits.substr(first);
  return significant.size() < 20 ||
         (significant.size() == 20 && significant <= "18446744073709551615");
}

std::string check_error(std::string_view input, Syntax syntax, const ParseError& e) {
  const std::string message = e.what();
  if (message.find('\n') != std::string::npos) return "error message has a newline: " + message;
  if (message.rfind("invalid hostlist ", 0) != 0) return "error message format: " + message;
  if (e.offset() > input.size()) return "error offset past the input: " + message;
  if (e.code() != core::ExitCode::kBadInput) return "error is not bad input: " + message;
  try {
    count(input, syntax);
    return "count() accepts what expand() refuses";
  } catch (const ParseError& again) {
    if (again.reason() != e.reason()) return "count() refuses for another reason";
  }
  bool called = false;
  try {
    for_each_host(
        input, [&](std::string_view) { called = true; }, syntax);
    return "for_each_host() accepts what expand() refuses";
  } catch (const ParseError&) {
    if (called) return "for_each_host() called back before refusing";
  }
  try {
    recompress(input, syntax);
    return "recompress() accepts what expand() refuses";
  } catch (const ParseError&) {
  }
  return "";
}

std::string check_hosts(std::string_view input, Syntax syntax,
                        const std::vector<std::string>& hosts) {
  if (count(input, syntax) != hosts.size()) return "count() differs from expand()";
  std::size_t i = 0;
  bool same = true;
  for_each_host(
      input, [&](std::string_view h) { same = same && i < hosts.size() && hosts[i++] == h; },
      syntax);
  if (!same || i != hosts.size()) return "for_each_host() differs from expand()";
  const std::string ranged = recompress(input, syntax);
  bool all_writable = true;
  for (const std::string& h : hosts) all_writable = all_writable && writable(h);
  if (!all_writable) {
    try {
      compress(hosts);
      return "compress() accepts a name it cannot write";
    } catch (const ParseError& e) {
      if (e.reason() != Reason::kNotWritable) return "compress() refuses for another reason";
    }
    return "";
  }
  if (expand(ranged, syntax) != hosts) return "expand(recompress(x)) != expand(x): " + ranged;
  std::string compressed;
  try {
    compressed = compress(hosts);
  } catch (const ParseError& e) {
    // Names that join into a run ending at 2^64-1 are refused: 22.05 could not read them back.
    if (e.reason() == Reason::kMaxNumberRange || e.reason() == Reason::kNumberWraps) return "";
    return std::string("compress() refuses writable names: ") + e.what();
  }
  if (expand(compressed) != hosts) return "expand(compress(expand(x))) != expand(x): " + compressed;
  return "";
}

}  // namespace

std::string check_properties(std::string_view input) {
  std::optional<std::vector<std::string>> current;
  for (Syntax syntax : {Syntax::kCurrent, Syntax::kSlurm2205}) {
    std::string problem;
    try {
      // Large expansions are checked by the unit and differential tests; here they would slow
      // the search down a hundredfold. Their count must still be computable.
      if (count(input, syntax) > kLargeExpansion) continue;
      std::vector<std::string> hosts = expand(input, syntax);
      problem = check_hosts(input, syntax, hosts);
      // Without a newline, the current syntax only adds suffixes: what 22.05 accepts is unchanged.
      if (problem.empty() && syntax == Syntax::kSlurm2205 &&
          input.find('\n') == std::string_view::npos && current != hosts)
        problem = "current syntax differs from 22.05 on an input 22.05 accepts";
      if (syntax == Syntax::kCurrent) current = std::move(hosts);
    } catch (const ParseError& e) {
      problem = check_error(input, syntax, e);
    }
    if (!problem.empty()) return (syntax == Syntax::kCurrent ? "[current] " : "[22.05] ") + problem;
  }
  return "";
}

}  // namespace dtlaunch::hostlist::test
