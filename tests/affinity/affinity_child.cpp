// A worker that prints what it was bound to, as the kernel sees it: "cpus=" its
// Cpus_allowed_list, "heap=" the policy /proc/self/numa_maps shows for its heap (after it has
// allocated), "mempolicy=" the mode and nodes get_mempolicy returns, and OMP_NUM_THREADS.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

int main() {
  // A heap of its own, touched, so that numa_maps has a [heap] line with pages.
  auto* block = static_cast<char*>(std::malloc(1 << 20));
  std::memset(block, 1, 1 << 20);

  std::string line;
  std::ifstream status("/proc/self/status");
  while (std::getline(status, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0)
      std::cout << "cpus=" << line.substr(line.find_first_not_of(" \t", 18)) << "\n";
  std::ifstream maps("/proc/self/numa_maps");
  while (std::getline(maps, line))
    if (line.find(" heap") != std::string::npos) {
      const auto start = line.find(' ') + 1;
      std::cout << "heap=" << line.substr(start, line.find(' ', start) - start) << "\n";
    }
  int mode = -1;
  unsigned long nodes[16] = {};
  if (::syscall(SYS_get_mempolicy, &mode, nodes, 16 * 8 * sizeof(unsigned long), nullptr, 0UL) == 0)
    std::cout << "mempolicy=" << mode << ":" << nodes[0] << "\n";
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::cout << "omp=" << (omp ? omp : "") << "\n";
  std::free(block);
  return 0;
}
