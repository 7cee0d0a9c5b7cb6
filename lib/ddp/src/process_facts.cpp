// Facts about processes and nodes that the shared-memory all_reduce's set-up and waits use
// (shm_reduce.hpp): whether a peer's process still runs, which ranks share a node, and which
// segments in /dev/shm a dead rank left.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "shm_reduce.hpp"

namespace dtlaunch::ddp::detail {
namespace {

// The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses).
std::vector<std::string> stat_fields(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return {};
  const std::string line(buf, static_cast<size_t>(n));
  const auto paren = line.rfind(')');
  if (paren == std::string::npos) return {};
  std::istringstream rest(line.substr(paren + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// Field 22 (starttime) is the 20th after the command name; field 3 (state) the 1st.
constexpr size_t kStateField = 0, kStartField = 19;

uint64_t start_ticks_of(const std::string& path) {
  const auto f = stat_fields(path);
  return f.size() > kStartField ? std::strtoull(f[kStartField].c_str(), nullptr, 10) : 0;
}

}  // namespace

std::string boot_id() {
  const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return s.substr(0, s.find('\n'));
}

uint64_t own_start_ticks() {
  return start_ticks_of("/proc/self/stat");
}

bool process_alive(int pid, uint64_t start_ticks) {
  const auto f = stat_fields("/proc/" + std::to_string(pid) + "/stat");
  if (f.size() <= kStartField) return false;
  if (f[kStateField] == "Z" || f[kStateField] == "X" || f[kStateField] == "x") return false;
  return std::strtoull(f[kStartField].c_str(), nullptr, 10) == start_ticks;
}

std::vector<std::vector<int>> group_by_node(const std::vector<std::string>& node_keys) {
  std::vector<std::vector<int>> nodes;
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < node_keys.size(); ++r) {
    auto [at, fresh] = index.emplace(node_keys[r], nodes.size());
    if (fresh) nodes.emplace_back();
    nodes[at->second].push_back(static_cast<int>(r));
  }
  return nodes;
}

void remove_stale_segments(const std::string& prefix) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    int pid = 0, used = 0;
    unsigned long long ticks = 0, nonce = 0;
    if (std::sscanf(name.c_str() + prefix.size(), "%d-%llu-%16llx%n", &pid, &ticks, &nonce,
                    &used) != 3 ||
        static_cast<size_t>(used) != name.size() - prefix.size() || pid <= 0)
      continue;
    // Only this user's: another user's segment is not this job's to judge (and the sticky
    // /dev/shm would refuse anyway).
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != ::geteuid())
      continue;
    if (!process_alive(pid, ticks)) ::shm_unlink(("/" + name).c_str());
  }
  ::closedir(dir);
}

}  // namespace dtlaunch::ddp::detail
