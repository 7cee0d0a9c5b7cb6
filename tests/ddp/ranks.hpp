// Starts copies of a program as the ranks of one job (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT of a free port) and collects each one's exit status and output.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddp_test {

struct RankResult {
  int rank = -1;
  int status = -1;     // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

struct RankRun {
  std::vector<RankResult> ranks;
  double seconds = 0;  // wall time until the last rank ended
};

// A port that was free a moment ago on 127.0.0.1.
int free_port();

// Runs `program args...` once for each rank in `launch` (a subset of 0..world-1 to leave ranks
// missing). Ranks still running after `limit` are killed (status 128+9).
RankRun run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                  const std::vector<int>& launch, const std::map<std::string, std::string>& env,
                  std::chrono::seconds limit = std::chrono::seconds(90));

// All ranks of a world of `world`.
std::vector<int> all_ranks(int world);

}  // namespace ddp_test
