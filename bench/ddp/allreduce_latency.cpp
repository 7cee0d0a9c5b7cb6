// One all_reduce's wall time on the Gloo group, back to back, as ranks of a job (bench/ddp/
// allreduce.sh and bench/ddp/hier.sh start them): `allreduce_latency [NUMEL] [REPS] [WARMUP]`
// (default 107000 float32, the size of dtlaunch-train's gradients, 428 KB; 2000 repetitions
// after 200 unmeasured). Rank 0
// prints "allreduce: numel N reps R shm on|off median_us M p10_us A p90_us B". DTLAUNCH_DDP_SHM=0
// gives Gloo's TCP path, the default the shared-memory one where all ranks are on this node.
#include <dtlaunch/ddp.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ddp = dtlaunch::ddp;

int main(int argc, char** argv) {
  const int64_t numel = argc > 1 ? std::atoll(argv[1]) : 107000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int warmup = argc > 3 ? std::atoi(argv[3]) : 200;
  torch::set_num_threads(1);
  ddp::InitOptions options;
  options.backend = ddp::Backend::kGloo;
  auto pg = ddp::init_process_group(options);
  std::ifstream maps("/proc/self/maps");
  bool shm = false;
  for (std::string line; std::getline(maps, line);)
    shm = shm || line.find("/dev/shm/dtlaunch-ddp-") != std::string::npos;
  auto t = torch::ones({numel});
  std::vector<double> us;
  for (int i = 0; i < warmup + reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pg->all_reduce(t);
    const auto end = std::chrono::steady_clock::now();
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    t.fill_(1.0);
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))];
  };
  if (pg->rank() == 0)
    std::printf("allreduce: numel %lld reps %d shm %s median_us %.1f p10_us %.1f p90_us %.1f\n",
                static_cast<long long>(numel), reps, shm ? "on" : "off", at(0.5), at(0.1), at(0.9));
  pg->barrier();
  return 0;
}
