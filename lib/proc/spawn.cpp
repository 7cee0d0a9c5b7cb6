#include "proc/spawn.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "core/error.hpp"
#include "proc/signal_pipe.hpp"

namespace dtlaunch {

namespace {

// After fork only async-signal-safe calls: everything exec needs is built before.
struct ExecArgs {
  std::vector<std::string> env_strings;
  std::vector<char*> argv, envp;
};

ExecArgs prepare(const WorkerProcess& worker) {
  ExecArgs a;
  a.env_strings = worker.env.to_strings();
  for (const std::string& s : worker.argv) a.argv.push_back(const_cast<char*>(s.c_str()));
  a.argv.push_back(nullptr);
  for (std::string& s : a.env_strings) a.envp.push_back(s.data());
  a.envp.push_back(nullptr);
  return a;
}

// Planned within the task's own mask, so the kernel refuses it only if that mask changed since.
constexpr char kBindFailed[] = "dtlaunch: the kernel refused this worker's --cpu-bind/--mem-bind\n";

// Makes `from` the descriptor `to` in the child, without close-on-exec.
void move_fd(int from, int to) {
  if (from == to) {
    ::fcntl(to, F_SETFD, 0);
  } else {
    ::dup2(from, to);
  }
}

}  // namespace

StartedWorker start_worker(const WorkerProcess& worker, int devnull) {
  ExecArgs args = prepare(worker);
  Pipe out = make_pipe(), err = make_pipe(), status = make_pipe();
  const pid_t parent = ::getpid();
  pid_t pid;
  {
    BlockAllSignals block;
    pid = ::fork();
    if (pid == 0) {
      SignalPipe::restore_in_child();
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      // The supervisor may have died before prctl took effect; then nobody would kill us.
      if (::getppid() != parent) ::_exit(1);
      move_fd(devnull, 0);
      move_fd(out.write.get(), 1);
      move_fd(err.write.get(), 2);
      if (worker.binding && worker.binding->apply() != 0) {
        [[maybe_unused]] const ssize_t n = ::write(2, kBindFailed, sizeof kBindFailed - 1);
        ::_exit(1);
      }
      block.unblock_in_child();
      ::execve(worker.program_path.c_str(), args.argv.data(), args.envp.data());
      const int e = errno;
      [[maybe_unused]] const ssize_t n = ::write(status.write.get(), &e, sizeof e);
      ::_exit(127);
    }
  }
  if (pid < 0) throw Error::system("fork", errno);
  // Also here, so the group exists before we signal it whichever side runs first. EACCES once
  // the child has exec'd: it did it itself, then.
  ::setpgid(pid, pid);
  StartedWorker started;
  started.pid = pid;
  started.out = std::move(out.read);
  started.err = std::move(err.read);
  started.exec_status = std::move(status.read);
  return started;
}

int wait_exec(StartedWorker& worker) {
  int e = 0;
  ssize_t n;
  do {
    n = ::read(worker.exec_status.get(), &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  worker.exec_status.reset();
  return n == static_cast<ssize_t>(sizeof e) ? e : 0;
}

}  // namespace dtlaunch
