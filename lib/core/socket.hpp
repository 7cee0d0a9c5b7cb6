// TCP connects with a deadline and one error convention (a descriptor, or -errno), for every
// client in dtlaunch that must not hang on an address that never answers: the doctor's
// check-in and network test, the DDP runtime's store and rendezvous, the heartbeat's links and
// probes. And the scan of this process's sockets that the runtime's watchdogs cut.
#pragma once

#include <netdb.h>
#include <sys/types.h>

#include <chrono>
#include <set>

namespace dtlaunch::core {

// Opens a socket for `address` (non-blocking, close-on-exec) and starts connecting it. Returns
// the descriptor, connected or still connecting (the caller owns it), or -errno when the
// connect failed at once (-ECONNREFUSED on the local host, -ENETUNREACH, ...). For a caller
// that waits in its own poll() loop; connect_until waits itself.
int start_connect(const addrinfo& address);

// How a connect begun by start_connect ended, once poll() reported the descriptor writable or
// in error: 0 when it is connected, else the errno (SO_ERROR's).
int connect_error(int fd);

// Opens a socket for `address` and connects it without blocking: waits at most `cap`, never
// past `deadline` (but at least 1 ms, so that a connection already accepted is seen). Returns
// the connected descriptor (non-blocking, close-on-exec; the caller owns it), or -errno:
// -ETIMEDOUT when no answer came in time, -ECONNREFUSED, ...
int connect_until(const addrinfo& address, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds cap = std::chrono::seconds(1));

// A socket among this process's descriptors: a descriptor number closed and reused for another
// socket is told apart by its inode.
struct OpenSocket {
  int fd;
  ino_t inode;
  auto operator<=>(const OpenSocket&) const = default;
};

// This process's sockets now, from /proc/self/fd (none when it cannot be read).
std::set<OpenSocket> open_sockets();

// The port of the peer `fd` is connected to (IPv4 or IPv6), or -1 when it has none.
int peer_port(int fd);

}  // namespace dtlaunch::core
