// Applying a Binding to the calling thread: sched_setaffinity and set_mempolicy as raw system
// calls (no libnuma, no numactl). Both survive execve and are inherited by every thread and
// process the program starts, so applying them just before exec places the program's first
// allocation and first thread.
#pragma once

#include <vector>

#include "affinity/plan.hpp"

namespace dtlaunch::affinity {

// A Binding turned into the kernel's masks ahead of time, so that a forked child can apply it
// with nothing left to allocate (async-signal-safe).
class PreparedBinding {
 public:
  explicit PreparedBinding(const Binding& binding);

  // Applies it to the calling thread. Returns 0, or the errno of the system call that failed.
  // MPOL_PREFERRED_MANY (several NUMA nodes under --mem-bind=local) needs Linux 5.15; an older
  // kernel refuses it with EINVAL and the thread keeps the default policy, which allocates on
  // the node of the CPU that runs it: one of the bound nodes.
  int apply() const noexcept;

 private:
  std::vector<unsigned long> cpu_mask_;
  std::vector<unsigned long> node_mask_;
  int mode_ = -1;  // MPOL_*, or -1: leave the memory policy alone
};

}  // namespace dtlaunch::affinity
