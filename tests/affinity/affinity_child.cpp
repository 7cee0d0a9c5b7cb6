// A worker that prints what it was bound to, as the kernel sees it: "cpus=" its
// Cpus_allowed_list, "heap=" the policy /proc/self/numa_maps shows for memory it allocated and
// touched, "mempolicy=" the mode and nodes get_mempolicy returns, and OMP_NUM_THREADS.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

namespace {

// The start of the mapping that holds `p`, from /proc/self/maps ("start-end perms ...").
unsigned long mapping_start(const void* p) {
  const auto address = reinterpret_cast<unsigned long>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const unsigned long start = std::stoul(line, nullptr, 16);
    const unsigned long end = std::stoul(line.substr(line.find('-') + 1), nullptr, 16);
    if (start <= address && address < end) return start;
  }
  return 0;
}

}  // namespace

int main() {
  // Memory of its own, touched, so that numa_maps shows the policy its pages were placed by.
  // mmap, not malloc: a sanitizer's allocator has no [heap].
  const std::size_t size = 1 << 20;
  void* block = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) return 1;
  std::memset(block, 1, size);

  std::string line;
  std::ifstream status("/proc/self/status");
  while (std::getline(status, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0)
      std::cout << "cpus=" << line.substr(line.find_first_not_of(" \t", 18)) << "\n";
  char start[32];
  std::snprintf(start, sizeof start, "%lx ", mapping_start(block));
  std::ifstream numa_maps("/proc/self/numa_maps");
  while (std::getline(numa_maps, line))
    if (line.rfind(start, 0) == 0) {
      const auto from = line.find(' ') + 1;
      std::cout << "heap=" << line.substr(from, line.find(' ', from) - from) << "\n";
    }
  int mode = -1;
  unsigned long nodes[16] = {};
  if (::syscall(SYS_get_mempolicy, &mode, nodes, 16 * 8 * sizeof(unsigned long), nullptr, 0UL) == 0)
    std::cout << "mempolicy=" << mode << ":" << nodes[0] << "\n";
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::cout << "omp=" << (omp ? omp : "") << "\n";
  ::munmap(block, size);
  return 0;
}
