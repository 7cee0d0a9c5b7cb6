// Starting one worker: fork, its own process group, death with the supervisor, stdout and stderr
// into pipes, exec. Each worker leads its own process group so that one kill(-pgid) reaches it
// and everything it started that stayed in the group (a shell's commands, data-loader
// processes), and so that the terminal's Ctrl-C reaches dtlaunch alone, which forwards it once.
#pragma once

#include <sys/types.h>

#include "proc/fd.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch {

struct StartedWorker {
  pid_t pid = -1;  // also its process group id
  UniqueFd out, err;
  // EOF once the exec succeeded (the write end is close-on-exec); an int errno if it failed.
  UniqueFd exec_status;
};

// Forks and execs `worker` with stdin from devnull (the pipes' write ends and every other
// descriptor of ours are close-on-exec). The child sets PR_SET_PDEATHSIG(SIGKILL), which fires
// when the *thread* that forked it ends: call it from the thread that supervises.
// Throws Error::system when fork fails; an exec failure is read later with wait_exec.
StartedWorker start_worker(const WorkerProcess& worker, int devnull);

// Blocks until the worker's exec has happened (returns 0) or failed (returns its errno).
int wait_exec(StartedWorker& worker);

}  // namespace dtlaunch
