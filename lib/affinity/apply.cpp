#include "affinity/apply.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace dtlaunch::affinity {

namespace {
// The kernel's values (include/uapi/linux/mempolicy.h), so as not to depend on how new the
// installed headers are.
constexpr int kMpolPreferred = 1;
constexpr int kMpolBind = 2;
constexpr int kMpolPreferredMany = 5;
constexpr unsigned kBits = 8 * sizeof(unsigned long);

std::vector<unsigned long> mask_of(const CpuSet& set) {
  std::vector<unsigned long> mask(set.empty() ? 1 : set.ids().back() / kBits + 1, 0);
  for (unsigned id : set.ids()) mask[id / kBits] |= 1UL << (id % kBits);
  return mask;
}
}  // namespace

PreparedBinding::PreparedBinding(const Binding& binding)
    : cpu_mask_(mask_of(binding.cpus)), node_mask_(mask_of(binding.mems)) {
  switch (binding.policy) {
    case MemPolicy::kNone:
      mode_ = -1;
      break;
    case MemPolicy::kPreferred:
      mode_ = kMpolPreferred;
      break;
    case MemPolicy::kPreferredMany:
      mode_ = kMpolPreferredMany;
      break;
    case MemPolicy::kBind:
      mode_ = kMpolBind;
      break;
  }
}

int PreparedBinding::apply() const noexcept {
  if (mode_ >= 0) {
    // maxnode counts one more than the bits passed: the kernel drops the last one.
    const long r =
        ::syscall(SYS_set_mempolicy, mode_, node_mask_.data(), node_mask_.size() * kBits + 1);
    if (r != 0 && !(mode_ == kMpolPreferredMany && errno == EINVAL)) return errno;
  }
  if (::syscall(SYS_sched_setaffinity, 0, cpu_mask_.size() * sizeof(unsigned long),
                cpu_mask_.data()) != 0)
    return errno;
  return 0;
}

}  // namespace dtlaunch::affinity
