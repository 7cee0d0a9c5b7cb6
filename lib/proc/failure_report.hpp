// How a worker's end is worded for people, after flux's doom plugin: who (rank, local rank,
// host), how (exit N or the signal's name) and what it said last. Pure formatting.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "proc/supervisor.hpp"

namespace dtlaunch::proc {

// "exit 3", "killed by SIGSEGV (core dumped)", "killed by signal 40" for a signal with no name.
std::string describe_end(int exit_code, int signal, bool core_dumped);

// The exit status a shell reports for the same end: the code, or 128+signal.
int exit_status_of(const WorkerFailure& failure);

// EX_TEMPFAIL from sysexits.h: a worker that stopped on request and wants to be run again
// (dtlaunch-train after its checkpoint; the preemptible template requeues on it). Not a crash,
// though it still ends the group.
inline constexpr int kExitStoppedToResume = 75;

// The heartbeat's "a peer was lost; I am healthy" (ExitCode::kPeerLost, docs/ddp.md): the worker
// is a victim of another rank's loss, and the report says so instead of "failed".
inline constexpr int kExitPeerLost = static_cast<int>(core::ExitCode::kPeerLost);

// Whether the failure is such a stop: it ends the group and is never restarted.
bool is_stopped_to_resume(const WorkerFailure& failure);

// "failed (exit 3)", "failed (killed by SIGSEGV)", or "stopped to be resumed (exit 75)".
std::string describe_outcome(int exit_code, int signal);

// The report printed to stderr when a group ends because of `failure`; every line ends in '\n':
//   dtlaunch: rank 3 (local 3) on node7 failed: exit 1; its last 2 lines:
//     [rank 3] loading shard 12
//     [rank 3] RuntimeError: shard 12 is missing
// An empty host leaves out " on <host>". Exit 75 reads "stopped to be resumed: exit 75
// (EX_TEMPFAIL)" instead of "failed: exit 75". A worker that dtlaunch killed at the end of the
// grace period reads "failed: killed by SIGKILL (from dtlaunch: still running 30 s after
// SIGTERM)": its status is 137, and the report says why.
std::string format_failure_report(const WorkerFailure& failure, std::string_view host);

// The line-prefix of a rank's relayed output, "[rank 3] ".
std::string rank_prefix(std::uint32_t rank);

}  // namespace dtlaunch::proc
