#include "launch/system.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "core/error.hpp"
#include "core/file.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::launch {

std::optional<std::string> LiveSystem::read_file_head(const std::string& path,
                                                      std::size_t max_bytes) const {
  return core::read_file_head(path, max_bytes);
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

std::string resolve_program(const std::string& program,
                            const std::optional<std::string>& path_variable) {
  if (program.empty()) throw core::Error(core::ExitCode::kNotFound, "program name is empty");
  if (program.find('/') != std::string::npos) {
    int error = 0;
    if (is_regular_executable(program, error)) return program;
    if (error == ENOENT || error == ENOTDIR)
      throw core::Error(core::ExitCode::kNotFound, core::excerpt(program, 300) + ": no such file");
    throw core::Error(core::ExitCode::kNotExecutable,
                      core::excerpt(program, 300) + ": cannot execute: " + std::strerror(error));
  }
  // As execvp: search PATH (an unset PATH means the confstr default), remember a candidate that
  // exists but is not executable, so that the error says which one.
  const std::string path = path_variable.value_or("/usr/local/bin:/usr/bin:/bin");
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
    throw core::Error(core::ExitCode::kNotExecutable,
                      core::excerpt(*not_executable, 300) +
                          ": cannot execute: " + std::strerror(not_executable_error));
  throw core::Error(core::ExitCode::kNotFound,
                    core::excerpt(program, 300) + ": command not found in PATH");
}

std::uint16_t find_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    throw core::Error(core::ExitCode::kBadInput,
                      "address '" + addr + "' does not resolve: " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  int last_errno = 0;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    const std::unique_ptr<const int, void (*)(const int*)> closer(&fd, [](const int* f) {
      if (*f >= 0) ::close(*f);
    });
    if (fd < 0 || ::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      last_errno = errno;
      continue;
    }
    const in_port_t port = bound.ss_family == AF_INET6
                               ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                               : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port;
    return ntohs(port);
  }
  throw core::Error::system("cannot bind a TCP port on '" + addr + "'", last_errno);
}

std::string supervisor_tag() {
  std::uint64_t random = 0;
  // The pid alone can recur (an earlier dtlaunch of the same pid whose orphans still run).
  if (::getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random))
    random =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char text[48];
  std::snprintf(text, sizeof text, "%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(random));
  return text;
}

std::uint16_t LiveSystem::free_port(const std::string& addr) const {
  return find_free_port(addr);
}

std::string LiveSystem::random_tag() const {
  return supervisor_tag();
}

}  // namespace dtlaunch::launch
