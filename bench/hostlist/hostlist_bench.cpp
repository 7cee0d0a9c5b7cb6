// Throughput of the hostlist library on two expressions of about 600,000 hosts: a few groups of
// 60,000 (Slurm caps one range at 65,536 hosts) and thousands of small groups, the latter also
// separated by blanks instead of commas.
//   dtlaunch_hostlist_bench            print hosts/s for expand, for_each_host, compress,
//   recompress dtlaunch_hostlist_bench --expr few|many   print the expression (for bench.sh)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hostlist/hostlist.hpp"

namespace {

using dtlaunch::hostlist::compress;
using dtlaunch::hostlist::expand;
using dtlaunch::hostlist::for_each_host;
using dtlaunch::hostlist::recompress;

std::string few_groups() {  // 10 x 60,000
  std::string e;
  for (int g = 0; g < 10; ++g) {
    if (g > 0) e += ',';
    e += "rack" + std::to_string(g) + "-n[000001-060000]";
  }
  return e;
}

std::string many_groups() {  // 6,000 x 100, as slurmctld writes a fragmented allocation
  std::string e;
  for (int g = 0; g < 6000; ++g) {
    if (g > 0) e += ',';
    e += "r" + std::to_string(g) + "n[01-50,52-101]";
  }
  return e;
}

std::string blank_separated() {  // as many, separated by blanks: no comma for the parser to find
  std::string e = many_groups();
  for (std::size_t i = 0; i < e.size(); ++i)
    if (e[i] == ',' && e[i - 1] == ']') e[i] = ' ';
  return e;
}

template <typename F>
double best_seconds(int runs, F&& f) {
  double best = 1e9;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took.count() < best) best = took.count();
  }
  return best;
}

void report(const char* name, const std::string& expr) {
  const std::vector<std::string> hosts = expand(expr);
  std::size_t sink = 0;
  const double t_expand = best_seconds(7, [&] { sink += expand(expr).size(); });
  const double t_visit =
      best_seconds(7, [&] { for_each_host(expr, [&](std::string_view h) { sink += h.size(); }); });
  const double t_compress = best_seconds(7, [&] { sink += compress(hosts).size(); });
  const double t_recompress = best_seconds(7, [&] { sink += recompress(expr).size(); });
  const double n = static_cast<double>(hosts.size());
  std::printf(
      "%-6s %8zu hosts, %6zu-byte expression | Mhosts/s: expand %6.1f  for_each_host %6.1f"
      "  compress %6.1f  recompress %6.1f   (%zu)\n",
      name, hosts.size(), expr.size(), n / t_expand / 1e6, n / t_visit / 1e6, n / t_compress / 1e6,
      n / t_recompress / 1e6, sink % 10);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--expr") == 0) {
    const std::string shape = argv[2];
    const std::string e = shape == "few"    ? few_groups()
                          : shape == "many" ? many_groups()
                                            : blank_separated();
    std::fwrite(e.data(), 1, e.size(), stdout);
    return 0;
  }
  report("few", few_groups());
  report("many", many_groups());
  report("blank", blank_separated());
  return 0;
}
