// What one task of a job tells rank 0 when `dtlaunch doctor` (or --preflight) runs, and the
// layout rank 0 expects. Plain values: gathered by probe.cpp, sent by client.cpp to server.cpp,
// judged by checks.cpp, so the judgement is a pure function tested on hand-made reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "contract/contract.hpp"

namespace dtlaunch::doctor {

struct FileIdentity {
  std::string path;
  std::uint64_t size = 0;
  std::string hash;  // 16 hex digits of a 64-bit content hash; empty when unreadable
  bool operator==(const FileIdentity&) const = default;
};

// A shared library the program will load: the name it is asked for (DT_NEEDED, or the path of
// the ELF interpreter, or "#!" for a script's interpreter) and the file the loader picks.
struct LibraryIdentity {
  std::string name;
  FileIdentity file;  // path "" when the loader does not find it
  bool operator==(const LibraryIdentity&) const = default;
};

// A task's report is the contract plus facts grouped by topic, each with one field table in
// report.cpp that writes it to the wire, reads it back and copies it between tasks of a node:
// a new fact is a member here and a line there (docs/architecture.md, "Where to add things").

// Where the task is, and how it reaches rank 0 (probe.cpp, client.cpp).
struct NetworkFacts {
  std::string host;                             // core::host_name()
  std::vector<std::string> master_resolves_to;  // addresses MASTER_ADDR resolves to here
  std::vector<std::string> host_resolves_to;    // addresses this host's own name resolves to
  std::string local_addr;  // the address the connection to rank 0 left from (rank 0: "")
  bool operator==(const NetworkFacts&) const = default;
};

// The devices and CPUs the task is given (the plan's, launch_check.cpp). CUDA_VISIBLE_DEVICES
// and OMP_NUM_THREADS as the program will see them: the contract's value, or the inherited one
// where the contract lets it stand.
struct PlacementFacts {
  std::string visible_devices;
  std::string bound_device;  // the device id (an entry of the list) bound to the rank; ""
  bool gpu_sharing_allowed = false;
  bool gpu_isolated_by_slurm = false;
  std::uint32_t gpus_on_node = 0;
  std::string cpus;  // this task's CPU affinity (or its --cpu-bind plan), Linux cpulist form
  // The CPUs local to its GPU (the PCI device's local_cpulist), "" when the GPU was not located;
  // cpus_far_from_gpu: none of `cpus` is among them (its threads and memory on the far socket).
  std::string gpu_local_cpus;
  bool cpus_far_from_gpu = false;
  std::string omp_num_threads;
  bool operator==(const PlacementFacts&) const = default;
};

// The node's limits (probe.cpp).
struct ResourceFacts {
  std::uint64_t shm_bytes = 0;                 // size of /dev/shm; 0 when absent
  std::optional<std::uint64_t> memlock_bytes;  // RLIMIT_MEMLOCK; nullopt: unlimited
  std::uint32_t infiniband_devices = 0;        // /sys/class/infiniband entries
  bool operator==(const ResourceFacts&) const = default;
};

// What will run (probe.cpp).
struct ProgramFacts {
  FileIdentity program;
  // The line the launch would fail with when its execve is refused (core/exec_error.hpp's, as
  // "PATH: cannot execute: ..."), "" when the kernel accepts the program or it cannot be told.
  std::string exec_error;
  int exec_status = 0;    // the launch's exit status then: 126 or 127
  FileIdentity launcher;  // dtlaunch itself
  std::string launcher_version;
  bool operator==(const ProgramFacts&) const = default;
};

// When: the task's wall clock when it sent the report, and (set by rank 0, never on the wire)
// when it arrived.
struct ClockFacts {
  std::int64_t sent_unix_ms = 0;
  std::int64_t received_unix_ms = 0;
  bool operator==(const ClockFacts&) const = default;
};

// Software, compared between nodes (software.hpp). `env`: this task's NCCL_*, GLOO_*, CUDA_*,
// TORCH_*, OMP_* and LD_LIBRARY_PATH as the program will see them (those the contract sets left
// out), by name. The rest is a node's and is sent by its lowest local rank only
// (`node_software`): the libraries the loader resolves for the program, the NVIDIA driver, the
// GPU models and the kernel.
struct SoftwareFacts {
  std::vector<std::pair<std::string, std::string>> env;
  bool node_software = false;
  std::vector<LibraryIdentity> libraries;
  std::string libraries_note;  // why the libraries are not listed ("a static program", ...)
  std::string driver_version;  // "" when /proc/driver/nvidia/version is absent
  std::vector<std::string> gpu_models;
  std::string kernel;  // uname -r
  bool operator==(const SoftwareFacts&) const = default;
};

struct TaskReport {
  // Who, and what it is told: the contract worker_contract() computed for this rank, the very
  // value a real launch exports (contract/contract.hpp).
  contract::WorkerContract contract;
  NetworkFacts network;
  PlacementFacts placement;
  ResourceFacts resources;
  ProgramFacts programs;
  ClockFacts clock;
  SoftwareFacts software;
  // The network test (network.hpp): the port this node's test listens on, 0 when it does not.
  std::uint16_t network_test_port = 0;

  bool operator==(const TaskReport&) const = default;
};

// One line a task could not help printing: why it never reached rank 0.
struct ClientFailure {
  std::string kind;     // "name not resolved", "connection refused", "timed out", "no route"
  std::string address;  // what it tried
};

// Text form of a report for the wire: "key=value" lines, values escaped (\\, \n), unknown keys
// ignored so that a newer dtlaunch can talk to an older one. parse throws Error (bad input).
std::string encode(const TaskReport& report);
TaskReport decode(std::string_view text);

// One more "key=value" line of the wire form, for what the exchange adds to a report's frame
// (wire.hpp's Relay); take_line removes the line of `key` from `text` and returns its value,
// nullopt when there is none.
std::string encode_line(std::string_view key, std::string_view value);
std::optional<std::string> take_line(std::string& text, std::string_view key);

// Where rank R should run, derived from the launch layout alone.
struct ExpectedRank {
  std::string host;        // how to name its node: the host name under Slurm, "node rank N" locally
  std::uint32_t node = 0;  // its node rank (SLURM_NODEID / --node-rank)
  std::uint32_t local_rank = 0;
};

struct Expectation {
  std::uint32_t world_size = 0;
  std::uint32_t nnodes = 0;
  bool nodes_are_hosts = false;  // Slurm: one host per node; local: several may share a host
  // world_size entries, or empty when the layout does not say (plane, arbitrary distribution)
  std::vector<ExpectedRank> ranks;
};

// Slurm's placement of ranks on nodes for the block (default) and cyclic distributions; for
// others (plane, arbitrary) only the world size is known.
Expectation slurm_expectation(const std::vector<std::string>& hosts,
                              const std::vector<std::uint32_t>& tasks_per_node,
                              std::string_view distribution);
// Local mode: nnodes launchers of nproc workers each.
Expectation local_expectation(std::uint32_t nnodes, std::uint32_t nproc_per_node);

}  // namespace dtlaunch::doctor
