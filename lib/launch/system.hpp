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

namespace dtlaunch {

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
  virtual Topology topology(const std::string& root) const = 0;
  virtual TaskMask task_mask(const std::string& root, const Topology& topology) const = 0;
};

class LiveSystem final : public System {
 public:
  std::optional<std::string> read_file_head(const std::string& path,
                                            std::size_t max_bytes) const override;
  std::uint32_t count_gpu_device_files() const override;
  std::optional<PortRange> ephemeral_port_range() const override;
  Topology topology(const std::string& root) const override { return read_topology(root); }
  TaskMask task_mask(const std::string& root, const Topology& topology) const override {
    return read_task_mask(root, topology);
  }
};

// execvp's search, done before anything starts so that a typo is an error with 127/126 rather
// than a half-started job. Returns the path to execute; throws Error(kNotFound / kNotExecutable).
std::string resolve_program(const std::string& program, const EnvMap& env);

}  // namespace dtlaunch
