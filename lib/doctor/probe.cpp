#include "doctor/probe.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "core/error.hpp"
#include "core/exec_error.hpp"
#include "core/host.hpp"
#include "core/text.hpp"
#include "proc/exec.hpp"

namespace dtlaunch::doctor {
namespace {

std::string cpulist_of_this_task() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return {};
  std::vector<std::uint32_t> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(static_cast<std::uint32_t>(cpu));
  return core::compact_ranges(cpus);
}

std::uint32_t count_entries(const char* directory) {
  DIR* dir = ::opendir(directory);
  if (dir == nullptr) return 0;
  std::uint32_t n = 0;
  while (const dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n;
}

}  // namespace

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string numeric_host(const sockaddr* address, socklen_t length) {
  char text[NI_MAXHOST] = "";
  if (::getnameinfo(address, length, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return text;
}

std::vector<std::string> resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return {};
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  std::vector<std::string> addresses;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    std::string text = numeric_host(a->ai_addr, a->ai_addrlen);
    if (!text.empty() && std::find(addresses.begin(), addresses.end(), text) == addresses.end())
      addresses.push_back(text);
  }
  return addresses;
}

FileIdentity identify_file(const std::string& path) {
  FileIdentity id{path, 0, ""};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return id;
  // FNV-1a's constants over 8-byte words, with a rotation so that every bit of a word reaches
  // the high half: 64 bits that tell builds apart, at about memory speed (a 500 MB binary is
  // hashed in well under a second, where byte-wise FNV-1a takes several).
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  std::vector<unsigned char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const auto bytes = static_cast<std::size_t>(n);
    id.size += bytes;
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, buffer.data() + i, 8);
      hash = (hash ^ word) * 0x100000001b3ULL;
      hash ^= hash >> 29;
    }
    for (; i < bytes; ++i) hash = (hash ^ buffer[i]) * 0x100000001b3ULL;
  }
  ::close(fd);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  id.hash = text;
  return id;
}

void probe_exec(std::vector<TaskReport>& reports, const std::string& program_path,
                const std::vector<std::string>& argv, const core::EnvMap& env) {
  const std::optional<int> refused = proc::trial_exec(program_path, argv, env);
  if (!refused || *refused == 0) return;
  const core::Error error = core::exec_error(program_path, *refused);
  for (TaskReport& r : reports) {
    r.programs.exec_error = error.what();
    r.programs.exec_status = error.exit_status();
  }
}

void probe_node(TaskReport& r) {
  r.network.host = core::host_name();
  r.network.host_resolves_to = resolve(r.network.host);
  r.network.master_resolves_to = resolve(r.contract.master_addr);
  if (r.placement.cpus.empty())
    r.placement.cpus = cpulist_of_this_task();  // unless a --cpu-bind plan says
  struct statvfs shm {};
  if (::statvfs("/dev/shm", &shm) == 0)
    r.resources.shm_bytes = std::uint64_t{shm.f_blocks} * shm.f_frsize;
  rlimit memlock{};
  if (::getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY)
    r.resources.memlock_bytes = memlock.rlim_cur;
  r.resources.infiniband_devices = count_entries("/sys/class/infiniband");
  r.programs.program = identify_file(r.programs.program.path);
  char self[4096] = "";
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  r.programs.launcher = identify_file(n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "");
  r.clock.sent_unix_ms = unix_ms();
}

void copy_node_facts(const TaskReport& from, TaskReport& to) {
  // The node's topics whole (probe_exec and the client fill their per-task parts later); of the
  // task's own placement, only the CPUs when no --cpu-bind plan gave it any.
  to.network = from.network;
  to.resources = from.resources;
  to.programs = from.programs;
  to.clock = from.clock;
  if (to.placement.cpus.empty()) to.placement.cpus = from.placement.cpus;
}

}  // namespace dtlaunch::doctor
