// Starts copies of a program as the ranks of one job (tests/support's Ranks, with one Gloo
// thread's worth of OpenMP each) and collects each one's exit status and output.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddp_test {

struct RankResult {
  int rank = -1;
  int status = -1;     // exit status, 128 + signal, or -1 when it outlived the limit
  std::string output;  // stdout and stderr together
};

struct RankRun {
  std::vector<RankResult> ranks;
  double seconds = 0;  // wall time until the last rank ended
};

// Runs `program args...` once for each rank in `launch` (a subset of 0..world-1 to leave ranks
// missing), with OMP_NUM_THREADS=1 and `env` on top. Ranks still running after `limit` are
// killed.
RankRun run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                  const std::vector<int>& launch, const std::map<std::string, std::string>& env,
                  std::chrono::seconds limit = std::chrono::seconds(90));

// All ranks of a world of `world`.
std::vector<int> all_ranks(int world);

}  // namespace ddp_test
