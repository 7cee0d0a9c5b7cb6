// Preemption notice. Slurm (and dtlaunch) tell a job to go away with SIGTERM, or with SIGUSR1
// a while before the time limit when the job asks for it (sbatch --signal=USR1@120). The
// handler only records the signal; the training loop polls it at step boundaries, where all
// ranks agree on stopping through a collective, so no rank is left waiting in an all-reduce.
// During start-up (until the process group is up) nothing polls it and the rendezvous may wait
// for minutes, so there the handler exits at once with kExitCheckpointed: nothing was trained
// yet, so nothing is lost, and a requeued job starts over from the same checkpoint.
#pragma once

namespace dtlaunch::train {

// The exit status of every rank after a signal-triggered checkpoint: EX_TEMPFAIL from
// <sysexits.h>, "try again later". The preemptible sbatch template requeues on it.
inline constexpr int kExitCheckpointed = 75;

// Installs the handler for SIGUSR1 and SIGTERM (SA_RESTART, so that blocking system calls in the
// communication library are not interrupted), in start-up mode: a signal exits at once with
// kExitCheckpointed and a line on stderr. After start-up, `also` (async-signal-safe) is called
// on each signal too: the runtime's ddp::request_stop, which ends a live recovery's wait for
// replacements so that the rank exits 75 (as at start-up) rather than after DTLAUNCH_DDP_LIVE_WAIT.
void install_stop_handlers(void (*also)() noexcept = nullptr);

// From here on a signal only sets the flag that stop_signal_received() returns.
void end_startup() noexcept;

// The number of the first stop signal received since install_stop_handlers(), or 0.
int stop_signal_received() noexcept;

}  // namespace dtlaunch::train
