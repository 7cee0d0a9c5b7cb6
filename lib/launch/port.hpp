// MASTER_PORT under Slurm: every task of a step must arrive at the same port without talking to
// the others, and two steps sharing a node must not collide. docs/master-port.md gives the odds.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dtlaunch::launch {

struct PortRange {
  std::uint16_t lo = 0;
  std::uint16_t hi = 0;  // inclusive
  std::uint32_t size() const { return std::uint32_t{hi} - lo + 1; }
  bool overlaps(const PortRange& o) const { return lo <= o.hi && o.lo <= hi; }
};

// Below Linux's default ephemeral range (32768-60999), so that a port the kernel hands out to
// some outgoing connection can never be the one a job wants to listen on. The same on every node
// by construction: a range read from each node's /proc could differ between nodes, and then the
// tasks of one job would disagree.
inline constexpr PortRange kDefaultPortRange{20000, 32767};

// "LO-HI" with 1024 <= LO <= HI <= 65535. Throws Error::bad_env naming `source`.
PortRange parse_port_range(std::string_view source, std::string_view text);

// The port of one step: within a job, consecutive step ids get consecutive ports (mod the range),
// so the steps of one job never collide; the job id and heterogeneous-job offset pick the start
// through a 64-bit mixer, so unrelated jobs land uniformly over the range.
std::uint16_t master_port_for(std::uint64_t job_id, std::uint64_t step_id, std::uint64_t het_offset,
                              PortRange range = kDefaultPortRange);

}  // namespace dtlaunch::launch
