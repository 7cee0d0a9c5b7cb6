// The name of the machine this process runs on, read in one place.
#pragma once

#include <string>
#include <string_view>

namespace dtlaunch::core {

// gethostname(2), or `unknown` when it fails.
std::string host_name(std::string_view unknown = "");

// The host name up to its first dot ("node7" for node7.cluster.example), or `unknown`: the
// form Slurm's node names and the runtime's messages use.
std::string short_host_name(std::string_view unknown = "");

}  // namespace dtlaunch::core
