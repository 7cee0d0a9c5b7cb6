// The I/O shell of the doctor's facts: what a task can find out about its node. The exchange
// with rank 0 is server.hpp's and client.hpp's.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "doctor/report.hpp"

namespace dtlaunch::doctor {

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

// The node's topics of `from` (network, resources, programs, clock: what probe_node fills) copied
// into `to`: the workers of one launcher share a node, and hashing the program once is enough.
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

}  // namespace dtlaunch::doctor
