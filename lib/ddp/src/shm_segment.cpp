// The shared-memory all_reduce's segment (shm_segment.hpp).
#include "shm_segment.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace dtlaunch::ddp::detail {

std::string Identity::record() const {
  return std::string(enabled ? "1" : "0") + "\n" + host + "\n" + boot_id + "\n" +
         std::to_string(pid) + "\n" + std::to_string(start_ticks) + "\n" +
         std::to_string(node_rank) + "\n" + (across_nodes ? "1" : "0");
}

Identity Identity::parse(const std::string& rec) {
  std::istringstream in(rec);
  Identity id;
  std::string enabled, pid, ticks, node_rank, across;
  std::getline(in, enabled);
  std::getline(in, id.host);
  std::getline(in, id.boot_id);
  std::getline(in, pid);
  std::getline(in, ticks);
  std::getline(in, node_rank);
  std::getline(in, across);
  id.enabled = enabled == "1";
  id.pid = std::atoi(pid.c_str());
  id.start_ticks = std::strtoull(ticks.c_str(), nullptr, 10);
  id.node_rank = std::atoi(node_rank.c_str());
  id.across_nodes = across == "1";
  return id;
}

std::string map_segment(const std::string& name, bool create, size_t size, Mapping& out) {
  const int fd = create ? ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)
                        : ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return "shm_open " + name + ": " + std::strerror(errno);
  std::string why;
  if (create) {
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      why = "ftruncate " + name + " to " + std::to_string(size) + " bytes: " + std::strerror(errno);
    } else if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
      // tmpfs allocates on first touch: without this a full /dev/shm is a SIGBUS mid-job.
      why = "reserving " + std::to_string(size >> 20) + " MiB in /dev/shm for " + name + ": " +
            std::strerror(err);
    }
  } else {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != size)
      why =
          name + " has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(size);
  }
  if (why.empty()) {
    out.base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (out.base == MAP_FAILED)
      why = "mmap " + name + ": " + std::strerror(errno);
    else
      out.size = size;
  }
  ::close(fd);
  if (!why.empty() && create) ::shm_unlink(name.c_str());
  return why;
}

}  // namespace dtlaunch::ddp::detail
