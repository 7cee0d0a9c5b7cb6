// A well-formed srun step environment for tests to start from and then break one thing at a time.
#pragma once

#include "core/env_map.hpp"

namespace dtlaunch_test {

// srun -N3 -n6 --ntasks-per-node=2 on node[1-3], seen by the task with the given rank.
inline dtlaunch::core::EnvMap slurm_step_env(int procid = 0, int localid = 0, int nodeid = 0) {
  return dtlaunch::core::EnvMap{
      {"SLURM_JOB_ID", "4242"},
      {"SLURM_STEP_ID", "0"},
      {"SLURM_PROCID", std::to_string(procid)},
      {"SLURM_LOCALID", std::to_string(localid)},
      {"SLURM_NODEID", std::to_string(nodeid)},
      {"SLURM_STEP_NUM_TASKS", "6"},
      {"SLURM_STEP_NUM_NODES", "3"},
      {"SLURM_STEP_NODELIST", "node[1-3]"},
      {"SLURM_STEP_TASKS_PER_NODE", "2(x3)"},
      {"SLURM_NTASKS", "6"},
      {"SLURM_DISTRIBUTION", "block"},
      {"PATH", "/usr/bin:/bin"},
  };
}

}  // namespace dtlaunch_test
