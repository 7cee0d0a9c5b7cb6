// TCP connect with a deadline, for every client in dtlaunch that must not hang on an address
// that never answers (the doctor's check-in, the DDP runtime's rendezvous).
#pragma once

#include <netdb.h>

#include <chrono>

namespace dtlaunch::core {

// Opens a socket for `address` and connects it without blocking: waits at most `cap`, never
// past `deadline` (but at least 1 ms, so that a connection already accepted is seen). Returns
// the connected descriptor (non-blocking, close-on-exec; the caller owns it), or -errno:
// -ETIMEDOUT when no answer came in time, -ECONNREFUSED, ...
int connect_until(const addrinfo& address, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds cap = std::chrono::seconds(1));

}  // namespace dtlaunch::core
