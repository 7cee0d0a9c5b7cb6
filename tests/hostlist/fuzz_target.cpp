// libFuzzer target: any byte string through every entry point of the hostlist library, checking
// the properties of properties.hpp. Run long sessions as docs/hostlist.md describes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "properties.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string problem = dtlaunch::hostlist::test::check_properties(input);
  if (!problem.empty()) {
    std::fprintf(stderr, "hostlist property violated: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
