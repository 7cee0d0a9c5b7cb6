// SIGUSR2 writes the flight recorder of every registered group (DTLAUNCH_DDP_DUMP_SIGNAL). The
// handler only writes a byte to a pipe; a thread of its own reads it and calls each monitor's
// dump_on_signal, so that the training threads never stop. Not installed.
#pragma once

namespace dtlaunch::ddp::detail {

class Monitor;

// Installs the handler once per process, and only over SIGUSR2's default action: a program that
// handles (or ignores) SIGUSR2 itself keeps it. Registers `m` and returns true when SIGUSR2 dumps;
// false (nothing registered) otherwise.
bool add_to_dumps(const Monitor* m);
// Unregisters `m`, waiting for a dump in progress to finish.
void remove_from_dumps(const Monitor* m);

}  // namespace dtlaunch::ddp::detail
