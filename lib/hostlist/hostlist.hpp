// Slurm hostlist expressions ("gpu[001-004,010],login-[a1,b2]-ib"), with the semantics of Slurm's
// own parser (scontrol show hostnames / show hostlist). docs/hostlist.md lists every rule and
// every deliberate difference from Slurm 22.05.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

namespace dtlaunch::hostlist {

// Bounds that make a hostile expression an error instead of an out-of-memory. A real step list
// has at most 65536 nodes (Slurm's MAX_SLURM_NODES); these leave room for 64 times that.
inline constexpr std::uint64_t kMaxHosts = std::uint64_t{1} << 22;  // hosts in one expansion
inline constexpr std::uint64_t kMaxChars = std::uint64_t{1} << 28;  // bytes of all names together

// Which generation of Slurm's grammar to follow. kCurrent (Slurm 23.02.5 and later) is what
// dtlaunch uses: newline separates hosts and text after the final bracket group is a suffix of
// every name. kSlurm2205 is Debian bookworm's scontrol: newline is part of a name and a suffix is
// an error; it exists so that tests can compare with that scontrol. Both reject what Slurm 22.05
// gets wrong (see Reason), so neither ever invents, clamps or drops a host.
enum class Syntax { kCurrent, kSlurm2205 };

// Why an expression (or a name given to compress) was refused.
enum class Reason {
  kNulByte,            // a NUL byte: C strings (argv, environment) cannot carry one
  kUnclosedBracket,    // '[' without ']' (Slurm 22.05 invented hosts such as "n]")
  kSuffix,             // text after the final group (kSlurm2205 only)
  kBadRange,           // a range item that is not N, N-M (empty, 'x', junk, descending)
  kRangeTooLarge,      // one range item of more than 65536 hosts (Slurm's MAX_RANGE)
  kTooManyItems,       // more than 262144 items in one group (Slurm aborts)
  kTooManyPrefixes,    // a non-final group of more than 65536 values (Slurm's MAX_PREFIX_CNT)
  kNumberTooLarge,     // a number above 2^64-1 (Slurm 22.05 silently clamps it)
  kMaxNumberRange,     // a run of hosts ending at 2^64-1 (Slurm 22.05 crashes or hangs)
  kNumberWraps,        // host 2^64-1 followed by host 0 of the same prefix (Slurm truncates)
  kIgnoredGroupError,  // an error in a group left of the last two (Slurm 22.05 ignores it)
  kTooManyHosts,       // the expansion exceeds kMaxHosts or kMaxChars
  kNotWritable,        // compress(): a name no expression can spell (brackets, blanks, ...)
};

// The error every function here throws: a dtlaunch::core::Error with ExitCode::kBadInput, a
// one-line message that quotes the expression and names the offending character, and the details.
class ParseError : public core::Error {
 public:
  ParseError(Reason reason, std::size_t offset, std::string message)
      : core::Error(core::ExitCode::kBadInput, std::move(message)),
        reason_(reason),
        offset_(offset) {}
  Reason reason() const noexcept { return reason_; }
  // Byte offset of the offending character in the expression (or index of the name).
  std::size_t offset() const noexcept { return offset_; }

 private:
  Reason reason_;
  std::size_t offset_;
};

// Expands an expression into host names, in Slurm's order, duplicates kept.
// Throws dtlaunch::core::Error (ExitCode::kBadInput) with a one-line message that quotes the
// expression and points at the offending character; never returns a partial list.
std::vector<std::string> expand(std::string_view expr);
std::vector<std::string> expand(std::string_view expr, Syntax syntax);

// The number of hosts expand() would return, without building them. Throws as expand() does.
std::uint64_t count(std::string_view expr, Syntax syntax = Syntax::kCurrent);

// Calls on_host(name) for every host of expr, in order, after the whole expression has been
// checked: on error nothing has been called. The view is valid only during the call. This is
// expand() without the vector, for printing hundreds of thousands of names.
template <typename F>
void for_each_host(std::string_view expr, F&& on_host, Syntax syntax = Syntax::kCurrent);

// The inverse: the ranged expression `scontrol show hostlist` prints for these names, in order
// (no sorting, no de-duplication). Each name must be a plain host name that reads back as
// itself: no brackets, separators or other blanks, no number above 2^64-1; otherwise it throws
// ParseError(kNotWritable). expand(compress(names)) == names for every accepted list.
std::string compress(const std::vector<std::string>& hosts);

// `scontrol show hostlist EXPR`: the ranged form of an expression, built from the ranges as
// written (so "1[2-3]" stays "1[2-3]" where compress(expand(..)) gives "[12-13]"). Accepts
// exactly what expand() accepts.
std::string recompress(std::string_view expr, Syntax syntax = Syntax::kCurrent);

// ---- implementation detail of for_each_host -------------------------------------------------
namespace detail {
using HostCallback = void (*)(void* context, std::string_view host);
void visit_hosts(std::string_view expr, Syntax syntax, HostCallback callback, void* context);
}  // namespace detail

template <typename F>
void for_each_host(std::string_view expr, F&& on_host, Syntax syntax) {
  using Fn = std::remove_reference_t<F>;
  detail::visit_hosts(
      expr, syntax,
      [](void* context, std::string_view host) { (*static_cast<Fn*>(context))(host); },
      const_cast<void*>(static_cast<const void*>(&on_host)));
}

}  // namespace dtlaunch::hostlist
