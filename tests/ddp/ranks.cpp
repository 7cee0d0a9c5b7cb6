#include "ranks.hpp"

#include "test_support.hpp"

namespace ddp_test {

std::vector<int> all_ranks(int world) {
  std::vector<int> r;
  for (int i = 0; i < world; ++i) r.push_back(i);
  return r;
}

RankRun run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                  const std::vector<int>& launch, const std::map<std::string, std::string>& env,
                  std::chrono::seconds limit) {
  const auto start = std::chrono::steady_clock::now();
  dtlaunch_test::TempDir dir("ddp-test");
  dtlaunch_test::RankOptions options{launch, {{"OMP_NUM_THREADS", "1"}}};
  for (const auto& [name, value] : env) options.env[name] = value;

  RankRun run;
  {
    dtlaunch_test::Ranks ranks(program, args, world, dir.path(), "ddp", options);
    const std::vector<int> status = ranks.wait_all(limit);
    for (size_t i = 0; i < ranks.launched().size(); ++i) {
      const int rank = ranks.launched()[i];
      run.ranks.push_back(RankResult{rank, status[i], ranks.log(rank)});
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace ddp_test
