#include "harness.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtlaunch_catch.hpp"

namespace proctest {

std::vector<pid_t> read_pids(const std::string& path) {
  std::vector<pid_t> pids;
  for (const std::string& line : split_lines(read_file(path)))
    if (!line.empty()) pids.push_back(static_cast<pid_t>(std::stol(line)));
  return pids;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file("/proc/" + name + "/stat");
    const std::size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

bool exists(pid_t pid) {
  return std::filesystem::exists("/proc/" + std::to_string(pid));
}

std::string process_name(pid_t pid) {
  std::string comm = read_file("/proc/" + std::to_string(pid) + "/comm");
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

Child::Child(const std::vector<std::string>& argv, const std::string& out_path,
             const std::string& err_path, const std::vector<int>& ignored) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (int sig : ignored) ::signal(sig, SIG_IGN);
    ::execv(args[0], args.data());
    ::_exit(126);
  }
  REQUIRE(pid_ > 0);
}

void Child::signal(int sig) const {
  ::kill(pid_, sig);
}

std::optional<int> Child::wait_for(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
    if (std::chrono::steady_clock::now() >= end) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      reaped_ = true;
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Ran run_driver(const std::vector<std::string>& args, const TempDir& dir,
               std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{PROC_DRIVER};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, dir, timeout);
}

Ran run_program(const std::vector<std::string>& argv, const TempDir& dir,
                std::chrono::milliseconds timeout) {
  become_subreaper();
  const auto start = std::chrono::steady_clock::now();
  Child child(argv, dir / "driver.out", dir / "driver.err");
  const std::optional<int> status = child.wait_for(timeout);
  Ran ran;
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ran.out = read_file(dir / "driver.out");
  ran.err = read_file(dir / "driver.err");
  INFO("stderr:\n" << ran.err);
  REQUIRE(status.has_value());
  ran.status = *status;
  // The driver is reaped: anything of its tree still around (alive or zombie) was re-parented
  // to this subreaper test process, and shows here.
  const std::vector<pid_t> left = children_of(::getpid());
  for (pid_t pid : left) UNSCOPED_INFO("left behind: " << pid << " " << process_name(pid));
  CHECK(left.empty());
  settle(std::chrono::seconds(5));
  return ran;
}

std::vector<pid_t> settle(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status;
    while (::waitpid(-1, &status, WNOHANG) > 0) {
    }
    const std::vector<pid_t> left = children_of(::getpid());
    if (left.empty() || std::chrono::steady_clock::now() >= end) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void become_subreaper() {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
}

}  // namespace proctest
