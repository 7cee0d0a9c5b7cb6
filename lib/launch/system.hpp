// The few facts about the machine that the launch decisions need, behind one interface so that
// the decisions stay pure and testable; LiveSystem reads the real machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "affinity/read_topology.hpp"
#include "core/env_map.hpp"
#include "launch/port.hpp"

namespace dtlaunch::launch {

class System {
 public:
  virtual ~System() = default;
  // At most the first max_bytes bytes of a file (SLURM_HOSTFILE, /proc files), or nullopt when
  // it cannot be read. Bounded because a path from the environment may name /dev/zero or a
  // multi-gigabyte file: the caller asks for one byte more than it accepts to see that it was cut.
  virtual std::optional<std::string> read_file_head(const std::string& path,
                                                    std::size_t max_bytes) const = 0;
  // GPUs the driver exposes on this node (/dev/nvidia0, /dev/nvidia1, ...).
  virtual std::uint32_t count_gpu_device_files() const = 0;
  // /proc/sys/net/ipv4/ip_local_port_range, when readable.
  virtual std::optional<PortRange> ephemeral_port_range() const = 0;
  // The node's topology and this task's inherited mask, read under root ("/", or
  // DTLAUNCH_TOPOLOGY_ROOT): see affinity/read_topology.hpp. Asked only when binding.
  virtual affinity::Topology topology(const std::string& root) const = 0;
  virtual affinity::TaskMask task_mask(const std::string& root,
                                       const affinity::Topology& topology) const = 0;
  // Local mode: a free TCP port on addr for a standalone MASTER_PORT, and the supervisor's tag
  // (DTLAUNCH_SUPERVISOR). Behind the interface so that a plan is a pure function in tests.
  virtual std::uint16_t free_port(const std::string& addr) const = 0;
  virtual std::string random_tag() const = 0;
};

class LiveSystem : public System {
 public:
  std::optional<std::string> read_file_head(const std::string& path,
                                            std::size_t max_bytes) const override;
  std::uint32_t count_gpu_device_files() const override;
  std::optional<PortRange> ephemeral_port_range() const override;
  affinity::Topology topology(const std::string& root) const override {
    return affinity::read_topology(root);
  }
  affinity::TaskMask task_mask(const std::string& root,
                               const affinity::Topology& topology) const override {
    return affinity::read_task_mask(root, topology);
  }
  std::uint16_t free_port(const std::string& addr) const override;
  std::string random_tag() const override;
};

// A free TCP port on addr (a numeric address or a host name), found by binding port 0 and
// reading back the port the kernel chose, for a standalone MASTER_PORT. The socket is closed
// before returning, so another process can still take the port before rank 0 binds it.
// Throws Error (ExitCode::kBadInput) when addr does not resolve, Error::system otherwise.
std::uint16_t find_free_port(const std::string& addr = "127.0.0.1");

// What names this supervisor in its workers' environments (SupervisorOptions::descendant_marker):
// "<pid>-<16 random hex digits>", unique among the processes of a machine.
std::string supervisor_tag();

// execvp's search over `path` (PATH; unset means the confstr default), done before anything starts
// so that a typo is an error with 127/126 rather than a half-started job. Returns the path to
// execute; throws Error(kNotFound / kNotExecutable).
std::string resolve_program(const std::string& program, const std::optional<std::string>& path);

}  // namespace dtlaunch::launch
