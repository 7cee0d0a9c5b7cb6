// Starting one worker: fork, its own process group, death with the supervisor, stdout and stderr
// into pipes, exec. Each worker leads its own process group so that one kill(-pgid) reaches it
// and everything it started that stayed in the group (a shell's commands, data-loader
// processes), and so that the terminal's Ctrl-C reaches dtlaunch alone, which forwards it once.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include "proc/fd.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch::proc {

struct StartedWorker {
  pid_t pid = -1;  // also its process group id
  UniqueFd out, err;
  // 0 once the worker runs the program; execve's errno when it could not (the child has then
  // exited 127 and must still be reaped).
  int exec_errno = 0;
};

// Starts `worker` with stdin from devnull (the pipes' write ends and every other descriptor of
// ours are close-on-exec) and returns once it has exec'd or failed to. The child sets
// PR_SET_PDEATHSIG(SIGKILL), which fires when the *thread* that started it ends: call it from
// the thread that supervises. Throws Error::system when clone fails.
//
// copy_below > 0 says that every descriptor the worker may inherit (devnull, the pipes' write
// ends, those dtlaunch itself inherited) is below it, and everything at or above it is ours and
// close-on-exec: the child then copies only that part of the descriptor table. Otherwise it
// copies all of it, and exec closes ours, which costs as much as we hold (two per worker).
// fd_limit: the RLIMIT_NOFILE the worker gets, set in the child before exec (dtlaunch raised
// its own soft limit for the descriptors it holds; the workers keep the one it was given).
StartedWorker start_worker(const WorkerProcess& worker, int devnull, int copy_below = 0,
                           const rlimit* fd_limit = nullptr);

// The same start for `dtlaunch --watch`: the program keeps our stdin, stdout and stderr (no
// pipes; out and err stay empty).
StartedWorker start_inheriting(const WorkerProcess& worker);

}  // namespace dtlaunch::proc
