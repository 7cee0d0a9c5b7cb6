// The I/O shell of the doctor: what a task can find out about its node, and the TCP exchange
// between the tasks and rank 0 at the very MASTER_ADDR:MASTER_PORT the program will use.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "doctor/checks.hpp"
#include "doctor/report.hpp"
#include "heartbeat/ring.hpp"

namespace dtlaunch::doctor {

class NetworkAgent;

// `dtlaunch doctor --network` (network.hpp).
struct NetworkOptions {
  bool enabled = false;
  std::chrono::milliseconds budget{2000};  // the whole test, every node at once
  std::uint32_t random_peers = 2;          // besides the ring neighbour
};

// Fills the node facts of `report` (host, name resolution, CPUs unless the caller set the ones a
// --cpu-bind plan gives the rank, /dev/shm, memlock,
// InfiniBand, the identity of the program and of dtlaunch, the wall clock); the caller has set
// who the task is and what it was told.
void probe_node(TaskReport& report);

// Whether the launch's execve of program_path, with the worker's argv and environment, would
// be accepted (proc/exec.hpp's trial_exec: the real system call, stopped before the program's
// first instruction); when not, every report gets the line and status the launch would fail
// with (core/exec_error.hpp). Nothing is said when it cannot be told.
void probe_exec(std::vector<TaskReport>& reports, const std::string& program_path,
                const std::vector<std::string>& argv, const core::EnvMap& env);

// The node facts of `from` (everything probe_node fills) copied into `to`: the workers of one
// launcher share a node, and hashing the program once is enough.
void copy_node_facts(const TaskReport& from, TaskReport& to);

// A socket address as numeric text ("10.0.0.1", "fe80::1%eth0"); "" when it cannot be written.
std::string numeric_host(const sockaddr* address, socklen_t length);

// The addresses `name` resolves to on this node, numeric; empty when it does not resolve.
std::vector<std::string> resolve(const std::string& name);

// Size and 64-bit content hash of a file (FNV-1a's constants over 8-byte words); hash "" when
// unreadable.
FileIdentity identify_file(const std::string& path);

// The current wall clock in ms since the epoch.
std::int64_t unix_ms();

using Clock = std::chrono::steady_clock;

// Rank 0 (or node 0 in local mode): listens on `port`, takes `own` reports and those of every
// task that connects until `expected.world_size` ranks have reported or the deadline passes,
// judges them, tells every task the verdict and closes the listener before returning.
// With network.enabled, the nodes' agents (those whose report has a network_port; rank 0's own
// is `own_agent`) then run the network test (network.hpp) before the verdict.
Verdict serve(const Expectation& expected, std::vector<TaskReport> own, std::uint16_t port,
              Clock::time_point deadline, const NetworkOptions& network = {},
              const NetworkAgent* own_agent = nullptr);

// Any other task: reports to rank 0 at addr:port, retrying with jittered back-off up to the
// deadline, and returns the exit status rank 0 decided (0 or 3). When rank 0 cannot be
// reached, throws Error(kProblem) whose one line says why, with the address it tried.
// `agent`: this node's network test agent, which runs the plan rank 0 may send; the verdict is
// then awaited `network_budget` longer.
// `ring`, when given, receives the heartbeat endpoints rank 0 sent back with the verdict
// (--watch): rank -> "ADDRESS PORT HOST", the successors of this task's ranks.
int report_to_rank0(const std::string& addr, std::uint16_t port, std::vector<TaskReport> mine,
                    Clock::time_point deadline, const NetworkAgent* agent = nullptr,
                    Clock::duration network_budget = {},
                    std::map<std::uint32_t, std::string>* ring = nullptr);

// How many ranks ahead on the ring rank 0 sends each --watch task the heartbeat endpoints of:
// the ring skips up to this many lost ranks in a row. O(1) per task. The heartbeat's own window.
inline constexpr std::uint32_t kHeartbeatWindow = heartbeat::kEndpointWindow;

// The wire form, for load generators (bench/doctor): the bytes a task sends rank 0, and the
// verdict taken off the front of what rank 0 answered (nullopt: incomplete; throws on a frame
// that is not a verdict).
std::string report_frames(const std::vector<TaskReport>& reports);
std::optional<int> take_verdict(std::string& buffer);

}  // namespace dtlaunch::doctor
