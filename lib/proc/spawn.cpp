#include "proc/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <memory>

#include "core/error.hpp"
#include "proc/exec.hpp"
#include "proc/signal_pipe.hpp"

namespace dtlaunch::proc {

namespace {

// Everything the child needs, built before the clone: between clone and exec the child runs
// in our memory and makes only async-signal-safe calls.
struct ChildArgs {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int devnull = -1, out = -1, err = -1;
  pid_t parent = 0;
  const BlockAllSignals* block = nullptr;
  int copy_below = 0;   // > 0: we share the parent's descriptor table until we unshare it
  int exec_errno = 0;   // written by the child when execve fails; read once it has exited
  int setup_errno = 0;  // written by the child when it could not get a table of its own
  const affinity::PreparedBinding* binding = nullptr;  // --cpu-bind/--mem-bind, masks built before
  const rlimit* fd_limit = nullptr;                    // the RLIMIT_NOFILE the worker gets back
};

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

int child_main(void* arg) {
  auto* a = static_cast<ChildArgs*>(arg);
  // With CLONE_FILES, a table of our own before anything else: only the descriptors below
  // copy_below, not the hundreds of pipes the supervisor holds for the other workers.
  if (a->copy_below > 0 &&
      close_range_from(static_cast<unsigned>(a->copy_below), kCloseRangeUnshare) != 0 &&
      ::unshare(CLONE_FILES) != 0) {
    a->setup_errno = errno;
    ::_exit(127);
  }
  SignalPipe::restore_in_child();
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The supervisor may have died before prctl took effect; then nobody would kill us.
  if (::getppid() != a->parent) ::_exit(1);
  move_fd(a->devnull, 0);
  move_fd(a->out, 1);
  move_fd(a->err, 2);
  if (a->binding && a->binding->apply() != 0) {
    [[maybe_unused]] const ssize_t n = ::write(2, kBindFailed, sizeof kBindFailed - 1);
    ::_exit(1);
  }
  if (a->fd_limit) ::setrlimit(RLIMIT_NOFILE, a->fd_limit);
  a->block->unblock_in_child();
  ::execve(a->path, a->argv, a->envp);
  a->exec_errno = errno;
  ::_exit(127);
}

// The child's stack while it shares our memory. One is enough: CLONE_VFORK suspends us until
// the child has exec'd or exited, so two children never use it at once.
constexpr std::size_t kChildStack = 256 << 10;

char* child_stack_top() {
  alignas(64) static char stack[kChildStack];
  return stack + sizeof stack;
}

// out/err: the pipes' write ends, or 1 and 2 to keep ours.
StartedWorker start_child(const WorkerProcess& worker, int devnull, int out_fd, int err_fd,
                          int copy_below, const rlimit* fd_limit) {
  const ExecArguments arguments(worker.argv, worker.env);
  ChildArgs args;
  args.path = worker.program_path.c_str();
  args.argv = arguments.argv();
  args.envp = arguments.envp();
  args.devnull = devnull;
  args.out = out_fd;
  args.err = err_fd;
  args.parent = ::getpid();
  args.binding = worker.binding.get();
  args.fd_limit = fd_limit;
  if (std::max({devnull, args.out, args.err}) < copy_below) args.copy_below = copy_below;
  pid_t pid;
  {
    BlockAllSignals block;
    args.block = &block;
    // CLONE_VM | CLONE_VFORK, as posix_spawn does (which cannot set PR_SET_PDEATHSIG): a fork
    // would copy our page tables for every worker and make each of our later writes a
    // copy-on-write fault, a cost that grows with our memory, itself growing with the number
    // of workers: start-up was quadratic in the workers. We resume once the child has exec'd.
    const int files = args.copy_below > 0 ? CLONE_FILES : 0;
    pid = ::clone(child_main, child_stack_top(), CLONE_VM | CLONE_VFORK | files | SIGCHLD, &args);
  }
  if (pid < 0) throw core::Error::system("clone", errno);
  if (args.setup_errno != 0) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw core::Error::system("unshare", args.setup_errno);
  }
  StartedWorker started;
  started.pid = pid;
  started.exec_errno = args.exec_errno;
  return started;
}

}  // namespace

StartedWorker start_worker(const WorkerProcess& worker, int devnull, int copy_below,
                           const rlimit* fd_limit) {
  Pipe out = make_pipe(), err = make_pipe();
  StartedWorker started =
      start_child(worker, devnull, out.write.get(), err.write.get(), copy_below, fd_limit);
  started.out = std::move(out.read);
  started.err = std::move(err.read);
  return started;
}

StartedWorker start_inheriting(const WorkerProcess& worker) {
  return start_child(worker, 0, 1, 2, 0, nullptr);
}

}  // namespace dtlaunch::proc
