// The machine facts a test wants the launch decisions to see; the live ones are exercised by the
// black-box and Slurm tests.
#pragma once

#include <map>

#include "launch/system.hpp"

namespace dtlaunch_test {

class FakeSystem final : public dtlaunch::launch::System {
 public:
  std::map<std::string, std::string> files;
  std::uint32_t gpu_files = 0;
  std::optional<dtlaunch::launch::PortRange> ephemeral = dtlaunch::launch::PortRange{32768, 60999};

  std::optional<std::string> read_file_head(const std::string& path,
                                            std::size_t max_bytes) const override {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second.substr(0, max_bytes);
  }
  std::uint32_t count_gpu_device_files() const override { return gpu_files; }
  std::optional<dtlaunch::launch::PortRange> ephemeral_port_range() const override {
    return ephemeral;
  }
  dtlaunch::affinity::Topology node;
  dtlaunch::affinity::TaskMask mask;
  mutable std::optional<std::string> topology_root;  // the root the launch asked for
  dtlaunch::affinity::Topology topology(const std::string& root) const override {
    topology_root = root;
    return node;
  }
  std::uint16_t port = 29400;
  mutable int free_port_calls = 0;  // a port is bound only for a standalone launch without one
  std::uint16_t free_port(const std::string&) const override {
    ++free_port_calls;
    return port;
  }
  std::string random_tag() const override { return "4242-00000000deadbeef"; }
  dtlaunch::affinity::TaskMask task_mask(const std::string&,
                                         const dtlaunch::affinity::Topology&) const override {
    return mask;
  }
};

}  // namespace dtlaunch_test
