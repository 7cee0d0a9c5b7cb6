// The properties every input must satisfy, shared by the fuzz target and the unit test that
// replays its regression inputs: no crash, expand/count/for_each_host/recompress agree, errors
// are one line, and expand(compress(expand(x))) == expand(x) whenever the names can be written.
#pragma once

#include <string>
#include <string_view>

namespace dtlaunch::hostlist::test {

// Returns a description of the first property that does not hold, or "" when all hold.
std::string check_properties(std::string_view input);

}  // namespace dtlaunch::hostlist::test
