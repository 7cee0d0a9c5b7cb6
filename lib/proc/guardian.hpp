// The watchdog that makes a SIGKILL of dtlaunch take the workers' descendants with it.
//
// PR_SET_PDEATHSIG kills a worker when dtlaunch dies, but not what the worker started: a shell's
// commands or data-loader processes would be re-parented to init and live on. The guardian is a
// tiny forked process in a process group of its own, ignoring the signals people send by name
// (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2). It holds the read end of a pipe whose write end
// only dtlaunch holds, and learns each worker's process group through it. When the pipe reaches
// EOF without a "disarm" message, dtlaunch is gone however it died, and the guardian sends
// SIGKILL to every group it was told about, then exits.
//
// A descendant that left its worker's process group (setsid, setpgid) is not in any of those
// groups. Given a marker, an environment entry ("NAME=value") that every worker carries and its
// descendants inherit, the guardian then also sweeps /proc and SIGKILLs every process whose
// environment holds it, round after round until a round finds none. What escapes: a descendant
// that replaced its whole environment (env -i) and left its group. While dtlaunch lives, the
// subreaper sweep (reaper.hpp) catches that one too.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string_view>

#include "proc/fd.hpp"

namespace dtlaunch::proc {

class Guardian {
 public:
  // Forks the guardian; it can watch up to `capacity` process groups, and sweeps for `marker`
  // unless it is empty. Throws Error::system.
  explicit Guardian(std::size_t capacity, std::string_view marker = {});
  ~Guardian() { disarm(); }
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  // From now on, the death of dtlaunch kills process group pgid.
  void watch(pid_t pgid);
  // The groups are taken care of: tells the guardian to exit without killing anything, and
  // waits for it unless the caller already reaped it. Idempotent.
  void disarm();
  // The caller's waitpid(-1) reaped the guardian: do not wait for it again.
  void mark_reaped() { reaped_ = true; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  UniqueFd write_;
};

}  // namespace dtlaunch::proc
