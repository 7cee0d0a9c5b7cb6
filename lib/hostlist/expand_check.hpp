// The check pass of expansion, shared with recompress(): parse, then replay Slurm's range
// joining to refuse what Slurm 22.05 gets wrong.
#pragma once

#include <cstddef>
#include <string_view>

#include "hostlist/hostlist.hpp"
#include "hostlist/joiner.hpp"
#include "hostlist/plan.hpp"

namespace dtlaunch::hostlist::detail {

// Parses expr and checks the whole expansion; throws ParseError.
Plan check(std::string_view expr, Syntax syntax);

// Throws the ParseError for a kWraps or kEndsAtMax push; returns for the others.
void refuse(std::string_view expr, std::size_t offset, Push result);

}  // namespace dtlaunch::hostlist::detail
