// The bucket plan: which gradients share an all-reduce. PyTorch's rule: a bucket closes once it
// reaches the cap, one dtype per bucket, and each dtype's first bucket has a smaller cap.
#include <algorithm>
#include <map>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<size_t>& slot_bytes,
                                              const std::vector<int>& slot_kind, size_t cap_bytes,
                                              size_t first_cap_bytes) {
  if (slot_bytes.size() != slot_kind.size())
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: plan_buckets got " +
                                        std::to_string(slot_bytes.size()) + " sizes but " +
                                        std::to_string(slot_kind.size()) + " kinds");
  struct Open {
    std::vector<size_t> slots;
    size_t bytes = 0;
    bool first = true;  // no bucket of this kind has closed yet
  };
  // Buckets of different kinds fill side by side; each is emitted where it closes, so the
  // result stays in ready order (a bucket's position is that of its last gradient).
  std::map<int, Open> open;
  std::vector<std::pair<size_t, std::vector<size_t>>> closed;  // (last slot, bucket)
  for (size_t i = 0; i < slot_bytes.size(); ++i) {
    Open& b = open[slot_kind[i]];
    b.slots.push_back(i);
    b.bytes += slot_bytes[i];
    if (b.bytes >= (b.first ? std::min(first_cap_bytes, cap_bytes) : cap_bytes)) {
      closed.emplace_back(i, std::move(b.slots));
      b = Open{};
      b.first = false;
    }
  }
  for (auto& [kind, b] : open)
    if (!b.slots.empty()) closed.emplace_back(b.slots.back(), std::move(b.slots));
  std::sort(closed.begin(), closed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<size_t>> buckets;
  buckets.reserve(closed.size());
  for (auto& [last, slots] : closed) buckets.push_back(std::move(slots));
  return buckets;
}

}  // namespace dtlaunch::ddp
