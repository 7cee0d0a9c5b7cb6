// Rank 0's comparisons of the software between nodes, and the exclude list. Pure, like
// checks.hpp: hand-made reports in, problems out.
#pragma once

#include <string>
#include <vector>

#include "doctor/checks.hpp"
#include "doctor/report.hpp"

namespace dtlaunch::doctor {

// Adds env-differs (a compared variable whose value differs between tasks), libraries-differ
// (a library the loader resolves to other contents, or does not find, on some nodes) and
// driver-differs (the NVIDIA driver version; the GPU models as a warning). `reports` are the
// first report of each rank, in rank order. What differs is judged against the most common
// value (a tie goes to rank 0's), so that the odd node is named, wherever rank 0 runs.
void compare_software(const std::vector<const TaskReport*>& reports,
                      std::vector<Problem>& problems);

// The hosts with an error-level problem that excluding the node can cure, as one Slurm hostlist
// expression ("node[3,7]"), in the order of the job's nodes (`expected`, then by name); "" when
// none. Problems of how the job was launched (world-mismatch, duplicate-rank, gpu-shared) do not
// count, nor names that are not host names ("node rank 1" in local mode).
std::string exclude_list(const Expectation& expected, const std::vector<Problem>& problems);

// The hosts of `reports`, each once in order of first appearance; their ranks (checks.cpp).
std::vector<std::string> unique_hosts(const std::vector<const TaskReport*>& reports);
std::vector<std::uint32_t> ranks_of(const std::vector<const TaskReport*>& reports);

// Host names as a hostlist expression when they can be written as one, else joined by ", ",
// each quoted through excerpt().
std::string hosts_text(const std::vector<std::string>& hosts);

}  // namespace dtlaunch::doctor
