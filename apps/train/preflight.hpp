// Checks of the command line's paths made at start-up, on every rank, before any communication:
// a typo found only at the first checkpoint would cost an epoch of training, and a rank that
// fails alone after the rendezvous takes the others down with "Connection reset by peer" before
// its own error is printed.
#pragma once

#include <string>

namespace dtlaunch::train {

// --checkpoint PATH must name a regular file or nothing yet (not a symbolic link, FIFO or device),
// in an existing, writable directory: a file is created there and removed again (every rank checks, as any rank may be rank 0 after a requeue). Throws
// dtlaunch::train::Error (exit status 2) naming the option, the path and what is wrong with it.
void check_checkpoint_path(const std::string& path);

}  // namespace dtlaunch::train
