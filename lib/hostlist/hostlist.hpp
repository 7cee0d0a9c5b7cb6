// Slurm hostlist expressions ("gpu[001-004,010],login-[a1,b2]-ib"), with the semantics of Slurm's
// own parser (scontrol show hostnames / show hostlist). docs/hostlist.md lists every rule and
// every deliberate difference from Slurm 22.05.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::hostlist {

// Expands an expression into host names, in Slurm's order, duplicates kept.
// Throws dtlaunch::Error (ExitCode::kBadInput) with a one-line message that quotes the
// expression and points at the offending character; never returns a partial list.
std::vector<std::string> expand(std::string_view expr);

// The inverse: the ranged expression `scontrol show hostlist` prints for these names, in order.
std::string compress(const std::vector<std::string>& hosts);

}  // namespace dtlaunch::hostlist
