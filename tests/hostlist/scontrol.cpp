#include "scontrol.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/text.hpp"
#include "test_support.hpp"

extern char** environ;

namespace dtlaunch::hostlist::test {
namespace {

using dtlaunch_test::split_lines;

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env) {
  int out_pipe[2];
  int err_pipe[2];
  check(pipe2(out_pipe, O_CLOEXEC) == 0, "pipe");
  check(pipe2(err_pipe, O_CLOEXEC) == 0, "pipe");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);

  // The child sees our environment minus the variables that change what scontrol reads.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("SLURM_", 0) == 0) continue;
    env_strings.emplace_back(entry);
  }
  for (const std::string& e : extra_env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    errno = rc;
    check(false, "posix_spawnp");
  }

  ProcessResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = 2;
  char buf[65536];
  // 22.05 loops forever on some inputs (a prefix group ending at 2^64-1): give up after 5 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (open_count > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      result.timed_out = true;
      for (pollfd& p : fds)
        if (p.fd >= 0) close(p.fd);
      break;
    }
    const int ready = poll(fds, 2, 100);
    if (ready < 0) {
      if (errno == EINTR) continue;
      check(false, "poll");
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) check(errno == EINTR, "waitpid");
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

Scontrol::Scontrol() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/dtlaunch-hostlist-XXXXXX";
  check(mkdtemp(pattern.data()) != nullptr, "mkdtemp");
  dir_ = pattern;
  std::ofstream(dir_ + "/slurm.conf") << "ClusterName=test\nSlurmctldHost=localhost\n";
  conf_env_ = "SLURM_CONF=" + dir_ + "/slurm.conf";
}

Scontrol::~Scontrol() {
  std::remove((dir_ + "/slurm.conf").c_str());
  rmdir(dir_.c_str());
}

SlurmAnswer Scontrol::show(const char* what, std::string_view expr) const {
  const ProcessResult r =
      run_process({"scontrol", "--", "show", what, std::string(expr)}, {conf_env_});
  SlurmAnswer a;
  a.err = r.err;
  a.crashed = r.signal != 0 || r.timed_out;
  // `show hostnames` exits 0 even on an invalid expression; only stderr tells.
  a.valid = !a.crashed && r.exit_code == 0 && r.err.find("Invalid hostlist:") == std::string::npos;
  if (a.valid) a.out = r.out;
  return a;
}

SlurmAnswer Scontrol::hostnames(std::string_view expr) const {
  SlurmAnswer a = show("hostnames", expr);
  if (a.valid) a.hosts = split_lines(a.out);
  return a;
}

SlurmAnswer Scontrol::hostlist(std::string_view expr) const {
  SlurmAnswer a = show("hostlist", expr);
  if (a.valid) {
    a.ranged = std::move(a.out);
    a.out.clear();
    if (!a.ranged.empty() && a.ranged.back() == '\n') a.ranged.pop_back();
  }
  return a;
}

bool Scontrol::available() const {
  try {
    return run_process({"scontrol", "--version"}, {conf_env_}).exit_code == 0;
  } catch (const std::exception&) {
    return false;
  }
}

std::string printable(std::string_view text) {
  return "\"" + core::excerpt(text, std::string_view::npos, core::Quote::kDouble) + "\"";
}

}  // namespace dtlaunch::hostlist::test
