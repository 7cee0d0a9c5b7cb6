#include "run_process.hpp"

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <sstream>
#include <stdexcept>

namespace dtlaunch_test {

ProcessResult run_process(const std::vector<std::string>& argv, const dtlaunch::core::EnvMap& env,
                          std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);

  std::vector<std::string> env_strings = env.to_strings();
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  ProcessResult result;
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0]);
  result.pid = pid;

  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      for (const pollfd& fd : fds)
        if (fd.fd >= 0) ::close(fd.fd);
      throw std::runtime_error(argv[0] + " did not finish within " +
                               std::to_string(timeout.count()) + " ms; its stderr: " + result.err);
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[65536];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::map<int, ChildValues> child_values_by_rank(const std::string& out) {
  std::map<int, ChildValues> ranks;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    int rank = 0;
    if (line.rfind("[rank ", 0) == 0) {
      rank = std::stoi(line.substr(6));
      line = line.substr(line.find("] ") + 2);
    }
    const auto eq = line.find('=');
    if (eq != std::string::npos) ranks[rank][line.substr(0, eq)] = line.substr(eq + 1);
  }
  return ranks;
}

}  // namespace dtlaunch_test
