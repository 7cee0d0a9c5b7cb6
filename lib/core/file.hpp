// Bounded reads of small files: the one implementation behind LiveSystem::read_file_head (paths
// named by variables) and the topology reader (sysfs, procfs).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace dtlaunch::core {

// At most the first max_bytes bytes of path, or nullopt when it cannot be opened or read.
// Bounded, because a path may name /dev/zero or a huge file; O_NONBLOCK, so that a FIFO fails
// instead of blocking the caller.
std::optional<std::string> read_file_head(const std::string& path, std::size_t max_bytes);

}  // namespace dtlaunch::core
