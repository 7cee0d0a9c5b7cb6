#include "proc/footprint.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace dtlaunch::proc {

namespace {

struct CodeMapping {
  unsigned long start = 0, end = 0;
  bool modified = false;  // a page of it was written (text relocations): its copy must stay
};

// The r-xp mappings of files in /proc/self/smaps, with whether any page of each is anonymous.
std::vector<CodeMapping> code_mappings() {
  std::vector<CodeMapping> found;
  std::ifstream smaps("/proc/self/smaps");
  bool in_code = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long start = 0, end = 0;
    char perms[5] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %*s %*s %*s %n", &start, &end, perms, &path_at) >=
            3 &&
        path_at > 0) {
      // Files only: not [vdso], [vsyscall] or anonymous memory.
      in_code = std::string(perms) == "r-xp" && line[path_at] == '/';
      if (in_code) found.push_back({start, end});
    } else if (in_code) {
      unsigned long kb = 0;
      if (std::sscanf(line.c_str(), "Anonymous: %lu kB", &kb) == 1 && kb > 0)
        found.back().modified = true;
    }
  }
  return found;
}

}  // namespace

std::size_t release_code_pages() {
  std::size_t released = 0;
  for (const CodeMapping& m : code_mappings()) {
    if (m.modified) continue;
    // MADV_DONTNEED on a private file mapping drops this process's page table entries; the file's
    // pages stay in the page cache (and in other processes), and a later access maps them again.
    if (::madvise(reinterpret_cast<void*>(m.start), m.end - m.start, MADV_DONTNEED) == 0)
      released += m.end - m.start;
  }
  return released;
}

}  // namespace dtlaunch::proc
