#include "proc/reaper.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <string>

#include "core/parse.hpp"

namespace dtlaunch::proc {

SubreaperScope::SubreaperScope() {
  ::prctl(PR_GET_CHILD_SUBREAPER, &previous_);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

SubreaperScope::~SubreaperScope() {
  ::prctl(PR_SET_CHILD_SUBREAPER, previous_);
}

namespace {

// The parent pid from /proc/<pid>/stat: "pid (comm) state ppid ...", where comm may hold
// spaces and parentheses, so the fields are counted from the last ')'.
std::optional<pid_t> parent_of(const char* pid_dir) {
  const std::string path = std::string("/proc/") + pid_dir + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::string_view stat(buf, static_cast<std::size_t>(n));
  const std::size_t close_paren = stat.rfind(')');
  if (close_paren == std::string_view::npos || close_paren + 4 >= stat.size()) return std::nullopt;
  std::string_view rest = stat.substr(close_paren + 4);  // past ") S "
  rest = rest.substr(0, rest.find(' '));
  const auto ppid = core::parse_uint(rest, INT32_MAX);
  if (!ppid) return std::nullopt;
  return static_cast<pid_t>(*ppid);
}

}  // namespace

std::vector<pid_t> list_children() {
  std::vector<pid_t> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  const pid_t self = ::getpid();
  while (const dirent* entry = ::readdir(proc)) {
    const auto pid = core::parse_uint(entry->d_name, INT32_MAX);
    if (!pid) continue;
    if (parent_of(entry->d_name) == self) children.push_back(static_cast<pid_t>(*pid));
  }
  ::closedir(proc);
  return children;
}

void kill_all_children(pid_t spare) {
  for (;;) {
    std::vector<pid_t> children = list_children();
    std::erase(children, spare);
    if (children.empty()) return;
    // Our children cannot be reaped by anyone else, so their pids cannot be reused meanwhile.
    for (pid_t pid : children) ::kill(pid, SIGKILL);
    for (pid_t pid : children) {
      int status;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

}  // namespace dtlaunch::proc
