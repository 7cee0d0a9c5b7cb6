#include "core/file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace dtlaunch::core {

std::optional<std::string> read_file_head(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::string text(max_bytes, '\0');
  std::size_t used = 0;
  while (used < max_bytes) {
    const ssize_t n = ::read(fd, text.data() + used, max_bytes - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  ::close(fd);
  text.resize(used);
  return text;
}

}  // namespace dtlaunch::core
