// The few facts about the machine that the launch decisions need, behind one interface so that
// the decisions stay pure and testable; LiveSystem reads the real machine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/env_map.hpp"
#include "launch/port.hpp"

namespace dtlaunch {

class System {
 public:
  virtual ~System() = default;
  // Contents of a small text file (SLURM_HOSTFILE), or nullopt when it cannot be read.
  virtual std::optional<std::string> read_text_file(const std::string& path) const = 0;
  // GPUs the driver exposes on this node (/dev/nvidia0, /dev/nvidia1, ...).
  virtual std::uint32_t count_gpu_device_files() const = 0;
  // /proc/sys/net/ipv4/ip_local_port_range, when readable.
  virtual std::optional<PortRange> ephemeral_port_range() const = 0;
};

class LiveSystem final : public System {
 public:
  std::optional<std::string> read_text_file(const std::string& path) const override;
  std::uint32_t count_gpu_device_files() const override;
  std::optional<PortRange> ephemeral_port_range() const override;
};

// execvp's search, done before anything starts so that a typo is an error with 127/126 rather
// than a half-started job. Returns the path to execute; throws Error(kNotFound / kNotExecutable).
std::string resolve_program(const std::string& program, const EnvMap& env);

}  // namespace dtlaunch
