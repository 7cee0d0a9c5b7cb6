// How rank 0's doctor server copes with many tasks: N clients on loopback, one thread each (as
// N processes on N nodes would be), all reporting to one serve() at once. Prints the time from
// the first connect to the last verdict and the cost per client, for each N given.
//   serve_bench [N...]        (default 256 1024 4096)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "doctor/client.hpp"
#include "doctor/probe.hpp"
#include "doctor/server.hpp"
#include "launch/system.hpp"

using namespace dtlaunch::doctor;

namespace {

double run_once(std::uint32_t n, double& spawn_seconds) {
  const std::uint16_t port = dtlaunch::launch::find_free_port();
  const Expectation expected = local_expectation(1, n);
  auto report = [&](std::uint32_t rank) {
    TaskReport r;  // one node: nnodes stays 1
    r.contract.rank = rank;
    r.contract.world_size = n;
    r.contract.master_addr = "127.0.0.1";
    r.contract.master_port = port;
    r.network.host = "bench";
    return r;
  };
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(60);
  Diagnosis verdict;
  std::thread server([&] { verdict = serve(expected, {report(0)}, port, deadline); });
  std::vector<std::thread> clients;
  std::vector<int> status(n, -1);
  for (std::uint32_t rank = 1; rank < n; ++rank)
    clients.emplace_back(
        [&, rank] { status[rank] = report_to_rank0("127.0.0.1", port, {report(rank)}, deadline); });
  const auto started = Clock::now();
  for (std::thread& t : clients) t.join();
  server.join();
  spawn_seconds = std::chrono::duration<double>(started - start).count();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::uint32_t ok = 0;
  for (std::uint32_t rank = 1; rank < n; ++rank) ok += status[rank] == 0;
  if (verdict.reports.size() != n || ok != n - 1 || !verdict.ok()) {
    std::fprintf(stderr, "serve_bench: %u clients: %zu reports, %u verdicts 0\n", n,
                 verdict.reports.size(), ok);
    std::exit(1);
  }
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::uint32_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(static_cast<std::uint32_t>(std::atoi(argv[i])));
  if (sizes.empty()) sizes = {256, 1024, 4096};
  rlimit files{};  // one descriptor per client on each side
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);
  std::printf(
      "| clients | start to last verdict (s) | of which starting the client threads (s) | per "
      "client (us) |\n|---|---|---|---|\n");
  for (std::uint32_t n : sizes) {
    double spawn = 0;
    const double s = run_once(n, spawn);
    std::printf("| %u | %.3f | %.3f | %.0f |\n", n, s, spawn, s * 1e6 / n);
    std::fflush(stdout);
  }
}
