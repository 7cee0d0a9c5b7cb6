#include "launch/system.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch {

std::optional<std::string> LiveSystem::read_file_head(const std::string& path,
                                                      std::size_t max_bytes) const {
  // O_NONBLOCK: a FIFO named by a variable must not block the launch (a read then fails).
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

std::uint32_t LiveSystem::count_gpu_device_files() const {
  // Devices are numbered densely from 0; stop at the first gap, as the driver's own count does.
  std::uint32_t n = 0;
  struct stat st {};
  while (n < 1024 && ::stat(("/dev/nvidia" + std::to_string(n)).c_str(), &st) == 0 &&
         S_ISCHR(st.st_mode))
    ++n;
  return n;
}

std::optional<PortRange> LiveSystem::ephemeral_port_range() const {
  auto text = read_file_head("/proc/sys/net/ipv4/ip_local_port_range", 64);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  unsigned lo = 0, hi = 0;
  if (!(in >> lo >> hi) || lo > hi || hi > 65535) return std::nullopt;
  return PortRange{static_cast<std::uint16_t>(lo), static_cast<std::uint16_t>(hi)};
}

namespace {
bool is_regular_executable(const std::string& path, int& error) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    error = errno;
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    error = EISDIR;
    return false;
  }
  if (::access(path.c_str(), X_OK) != 0) {
    error = errno;
    return false;
  }
  return true;
}
}  // namespace

std::string resolve_program(const std::string& program, const EnvMap& env) {
  if (program.empty()) throw Error(ExitCode::kNotFound, "program name is empty");
  if (program.find('/') != std::string::npos) {
    int error = 0;
    if (is_regular_executable(program, error)) return program;
    if (error == ENOENT || error == ENOTDIR)
      throw Error(ExitCode::kNotFound, excerpt(program, 300) + ": no such file");
    throw Error(ExitCode::kNotExecutable,
                excerpt(program, 300) + ": cannot execute: " + std::strerror(error));
  }
  // As execvp: search PATH (an unset PATH means the confstr default), remember a candidate that
  // exists but is not executable, so that the error says which one.
  std::string path = std::string(env.get("PATH").value_or("/usr/local/bin:/usr/bin:/bin"));
  std::optional<std::string> not_executable;
  int not_executable_error = 0;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t colon = path.find(':', pos);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(pos, colon - pos);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    int error = 0;
    if (is_regular_executable(candidate, error)) return candidate;
    if (error != ENOENT && error != ENOTDIR && !not_executable) {
      not_executable = candidate;
      not_executable_error = error;
    }
    pos = colon + 1;
  }
  if (not_executable)
    throw Error(ExitCode::kNotExecutable, excerpt(*not_executable, 300) + ": cannot execute: " +
                                              std::strerror(not_executable_error));
  throw Error(ExitCode::kNotFound, excerpt(program, 300) + ": command not found in PATH");
}

}  // namespace dtlaunch
