// The hand-made job that the doctor's unit tests judge: srun -N<nodes> --ntasks-per-node=2 on
// node1..nodeN, block distribution, every report healthy. Each test then breaks what it checks.
#pragma once

#include <string>
#include <vector>

#include "doctor/report.hpp"

namespace doctor_fixture {

inline constexpr std::uint32_t kTasksPerNode = 2;

inline dtlaunch::doctor::Expectation layout(std::uint32_t nodes) {
  std::vector<std::string> hosts;
  for (std::uint32_t n = 1; n <= nodes; ++n) hosts.push_back("node" + std::to_string(n));
  return dtlaunch::doctor::slurm_expectation(
      hosts, std::vector<std::uint32_t>(nodes, kTasksPerNode), "block");
}

// Rank `rank` of a job of `nodes` nodes: what it is told, and a node that is fine.
inline dtlaunch::doctor::TaskReport healthy(std::uint32_t rank, std::uint32_t nodes) {
  dtlaunch::doctor::TaskReport r;
  r.contract.rank = rank;
  r.contract.local_rank = rank % kTasksPerNode;
  r.contract.local_world_size = kTasksPerNode;
  r.contract.node_rank = rank / kTasksPerNode;
  r.contract.world_size = nodes * kTasksPerNode;
  r.contract.nnodes = nodes;
  r.contract.master_addr = "node1";
  r.contract.master_port = 29500;
  r.contract.dtlaunch_run_id = "slurm-42.0";
  const std::string node = std::to_string(rank / kTasksPerNode + 1);
  r.network.host = "node" + node;
  r.network.master_resolves_to = {"10.0.0.1"};
  r.network.host_resolves_to = {"10.0.0." + node};
  r.placement.cpus = "0-7";
  r.resources.shm_bytes = 64ull << 30;
  r.programs.program = {"/opt/train", 1000, "00000000000000aa"};
  r.programs.launcher = {"/usr/bin/dtlaunch", 2000, "00000000000000bb"};
  r.programs.launcher_version = "dtlaunch 0.1.0";
  r.clock.sent_unix_ms = r.clock.received_unix_ms = 1'000'000 + rank;
  return r;
}

}  // namespace doctor_fixture
