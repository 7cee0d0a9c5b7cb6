// A client of rank 0's c10d TCPStore that no byte sequence from the port can abort (issue 26).
//
// LibTorch 1.13's own client (c10d::TCPStore without isServer) opens a second connection whose
// background thread parses whatever the peer sends, asked or not, without bounds: a 64-bit length
// of 0xff bytes is a std::length_error in that thread, so std::terminate and exit 134, whatever
// the caller catches. This client speaks the same wire protocol (1.13's TCPStoreMasterDaemon: a
// query byte, then 64-bit lengths and bytes) on one connection, reads only what it asked for,
// bounds every length, and has no thread: garbage becomes an exception in the calling thread.
// LibTorch 2.x has no such thread and keeps c10d's client (its protocol adds a handshake).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// The peer's bytes are not a c10d TCPStore's reply: unasked bytes, an unknown answer, a length
// past the bound. The message says "a c10d TCPStore response was expected", as the rendezvous
// classifies it (kConfig: MASTER_PORT is another program's).
struct StoreProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The largest value or key the client accepts from the peer. The runtime's values are records
// of a few KB and Gloo's addresses; anything near this is garbage read as a length.
constexpr uint64_t kStoreMaxValueBytes = uint64_t{64} << 20;

// Opens the store at MASTER_ADDR:MASTER_PORT as `options` say (options.isServer: hosts it here),
// on the server kind env asks for (USE_LIBUV where this LibTorch has libuv). On LibTorch 1.x a
// client is the bounded one below.
c10::intrusive_ptr<c10d::Store> open_store(const WorkerEnv& env, c10d::TCPStoreOptions options);

// Connects to host:port within `timeout` (a wait's default limit, as TCPStore's) and
// returns the store. Keys are prefixed with "/" as c10d::TCPStore prefixes them, so both clients
// see the same keys. Throws std::runtime_error when the connection fails.
c10::intrusive_ptr<c10d::Store> connect_bounded_store(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout);

}  // namespace dtlaunch::ddp::detail
