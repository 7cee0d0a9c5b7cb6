// The processes of `dtlaunch job`: srun started so that it dies with the driver, its two output
// streams read as they come, helpers (squeue, scancel) run to completion, and the batch script's
// signals recorded for the main loop. Shared by the attempt of driver.cpp and the live attempt of
// live_driver.cpp.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "core/fd.hpp"
#include "job/outcome.hpp"
#include "job/srun_output.hpp"
#include "proc/fd.hpp"
#include "proc/output_relay.hpp"

namespace dtlaunch::job::detail {

// The one srun of an attempt, to which SIGUSR1/2 go at once; 0 while none or several run.
extern volatile sig_atomic_t g_srun_pid;
// SIGTERM, SIGINT or SIGHUP to the driver: the job stops (the loops pass it to the tasks).
extern volatile sig_atomic_t g_stop_signal;
// SIGUSR1/2 while several sruns run (g_srun_pid 0): the loop passes it to each.
extern volatile sig_atomic_t g_user_signal;

void install_forwarding();

// posix_spawnp with the signals the driver catches back at their defaults.
pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd);
// srun, which gets SIGTERM (and so ends its step) when the driver dies, with `extra_env` added to
// the driver's environment for it alone. Throws Error when it cannot be started.
pid_t spawn_srun(const std::vector<std::string>& argv, int out_fd, int err_fd,
                 const std::vector<std::pair<std::string, std::string>>& extra_env = {});
int shell_status(int wstatus);
// Runs a helper (squeue, scancel) to completion and returns its stdout.
std::string capture(const std::vector<std::string>& argv);
// The job's running steps other than the batch and extern ones ("JOB.STEP").
std::vector<std::string> running_steps(const std::string& job_id);

// One stream of srun (its stdout or stderr): passed on, the labels srun puts on the tasks' lines
// taken off, and read line by line (srun_output.hpp).
struct Stream {
  core::UniqueFd fd;
  int to = -1;
  SrunOutput reader;
};

// Reads what came on `s` into its reader and passes it on; false at the stream's end.
bool pump(Stream& s, proc::Console& console);
// Waits up to 100 ms for any of the streams or for room in our own output, and serves them.
void pump_ready(const std::vector<Stream*>& streams, proc::Console& console);
// proc::make_pipe, with the message that says what the pipe was for.
proc::Pipe srun_pipe();

struct AttemptRun {
  Evidence evidence;
  int status = 0;
  std::chrono::milliseconds wall{0};
  std::chrono::milliseconds stop{0};
};

// The operator's signal to every task of the job's steps (scancel --signal), said on `err`.
void deliver_to_tasks(const std::string& job_id, int sig, std::ostream& err);

}  // namespace dtlaunch::job::detail
