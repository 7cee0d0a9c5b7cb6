// Slurm's compressed tasks-per-node syntax, as in SLURM_STEP_TASKS_PER_NODE: "8(x2),4" means
// 8 tasks on each of the first two nodes and 4 on the third.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace dtlaunch::launch {

// One count per node, in node order. Throws Error::bad_env naming `variable` and quoting the
// value for anything but comma-separated "N" or "N(xM)" items with N >= 1 and M >= 1, or when the
// expansion would exceed max_nodes entries.
std::vector<std::uint32_t> parse_tasks_per_node(std::string_view variable, std::string_view text,
                                                std::size_t max_nodes = 1u << 20);

}  // namespace dtlaunch::launch
