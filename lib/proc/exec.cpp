#include "proc/exec.hpp"

#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "core/error.hpp"
#include "core/exec_error.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch::proc {

namespace {

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

ExecArguments::ExecArguments(const std::vector<std::string>& argv, const core::EnvMap& env)
    : argv_strings_(argv),
      env_strings_(env.to_strings()),
      argv_(pointers_to(argv_strings_)),
      envp_(pointers_to(env_strings_)) {}

void exec_program(const std::string& program_path, const std::vector<std::string>& argv,
                  const core::EnvMap& env) {
  const ExecArguments arguments(argv, env);
  ::execve(program_path.c_str(), arguments.argv(), arguments.envp());
  // Local mode's workers fail through the same mapping (proc/spawn.cpp).
  throw core::exec_error(program_path, errno);
}

void exec_worker(const WorkerProcess& worker) {
  if (worker.binding)
    if (const int e = worker.binding->apply())
      throw core::Error::system("binding rank " + std::to_string(worker.rank) +
                                    " (--cpu-bind/--mem-bind: sched_setaffinity, set_mempolicy)",
                                e);
  exec_program(worker.program_path, worker.argv, worker.env);
}

std::optional<int> trial_exec(const std::string& program_path, const std::vector<std::string>& argv,
                              const core::EnvMap& env) {
  const ExecArguments arguments(argv, env);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  // What the child says through the pipe: {0, errno} when PTRACE_TRACEME failed, {1, errno}
  // when execve did. A successful execve closes the pipe (close-on-exec) and stops the child.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int said[2] = {0, 0};
    if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) {
      said[1] = errno;
    } else {
      ::execve(program_path.c_str(), arguments.argv(), arguments.envp());
      said[0] = 1;
      said[1] = errno;
    }
    [[maybe_unused]] const ssize_t n = ::write(fds[1], said, sizeof said);
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return std::nullopt;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::optional<int> result;
  if (WIFSTOPPED(status)) {  // exec'd, stopped before its first instruction
    result = 0;
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  } else {
    int said[2] = {0, 0};
    if (::read(fds[0], said, sizeof said) == static_cast<ssize_t>(sizeof said) && said[0] == 1)
      result = said[1];
  }
  ::close(fds[0]);
  return result;
}

}  // namespace dtlaunch::proc
