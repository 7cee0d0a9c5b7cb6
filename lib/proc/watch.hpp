// `dtlaunch --watch`: dtlaunch stays the program's thin parent instead of exec'ing it, so that a
// heartbeat between the tasks' launchers (lib/heartbeat) can stop a program whose peer was lost
// and exit 76 (ExitCode::kPeerLost). The program inherits stdin, stdout and stderr, leads its own
// process group (signals go to the group), and dies with dtlaunch (PR_SET_PDEATHSIG).
#pragma once

#include <chrono>
#include <functional>
#include <iosfwd>
#include <string>

#include "proc/supervisor.hpp"

namespace dtlaunch::proc {

struct WatchOptions {
  // After a loss: SIGTERM (and SIGCONT, so that a stopped program sees it), SIGKILL after this.
  std::chrono::milliseconds grace = kDefaultGrace;
  // Readable once a peer is lost (the heartbeat's verdict callback writes to it).
  int lost_fd = -1;
  // The one line printed on a loss, asked for once lost_fd is readable.
  std::function<std::string()> loss_line;
  // Called once the program is reaped, while our handlers still catch every forwarded signal:
  // a SIGTERM that srun --kill-on-bad-exit sends meanwhile cannot turn our status into 143.
  std::function<void()> before_return;
};

// Starts `program` and waits for it, forwarding every catchable signal dtlaunch receives to the
// program's process group (SIGUSR2 included: the DDP runtime dumps its flight recorder on it).
// Returns the program's status (128+N when killed by signal N; 126/127 when it could not be
// exec'd), or 76 once a peer was lost and the program stopped. Call from the thread that will
// wait (PR_SET_PDEATHSIG follows the thread that started the child). Throws Error::system.
int watch_program(const WorkerProcess& program, const WatchOptions& options, std::ostream& err);

}  // namespace dtlaunch::proc
