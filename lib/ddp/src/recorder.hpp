// The flight recorder: a ring of the last N collectives of a group (lib/flight's Collective), and
// the runtime's words for one ("all_reduce #5 (float32, 256 elements)"). Not installed.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "flight/collective.hpp"

namespace dtlaunch::ddp::detail {

using Op = flight::Op;
using flight::op_name;
// PyTorch's names ("float32", "bfloat16"), which the people reading a report know; "" for -1.
std::string dtype_name(int8_t dtype);

// 88 bytes a slot: the ring's cost is entries x 88 bytes once full, allocated as entries arrive.
inline constexpr size_t kMaxTraceEntries = 1'000'000;
using flight::kMaxShapeDims;

// One collective in the ring. Times are this rank's wall clock in microseconds since the epoch;
// the file carries the offset to rank 0's clock (clock_offset_us) that lines the ranks up.
using CollectiveRecord = flight::Collective;

// The wall clock of the records: microseconds since the epoch.
int64_t now_us();
// "1.50 s": an age or a duration in the runtime's words.
std::string seconds_text(double s);

// "all_reduce (float32, 256 elements)", "broadcast (float32, 10 elements, root 0)", "barrier":
// the element count where flight::signature_text gives the shape.
std::string signature_with_count(const CollectiveRecord& r);
// "all_reduce #5 (float32, 256 elements)".
std::string describe(const CollectiveRecord& r);

// The ring and the position derived from it; shared with the watcher thread, which may outlive
// the group.
class FlightRecorder {
 public:
  // Reserves nothing: a slot is allocated when its first entry arrives.
  explicit FlightRecorder(size_t entries) : capacity_(entries) {}
  uint64_t begin(Op op, const at::Tensor* tensor, int root);
  void handed_to_backend(uint64_t seq);
  void end(uint64_t seq, bool ok);
  // Bytes the ring holds now (its allocation), for the test that init costs no more than that.
  size_t allocated_bytes() const;
  uint64_t started() const noexcept { return next_seq_.load(std::memory_order_relaxed); }
  // The record of `seq` if the ring still holds it (a bare one with seq and op otherwise).
  CollectiveRecord find(uint64_t seq) const;
  // The latest collective this rank entered (seq 0 when none).
  CollectiveRecord last() const;
  std::vector<CollectiveRecord> entries() const;  // oldest first

 private:
  CollectiveRecord* slot(uint64_t seq);  // under mutex_; nullptr when the ring holds no seq

  const size_t capacity_;
  std::atomic<uint64_t> next_seq_{0};
  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> ring_;  // grows to capacity_, then wraps
  CollectiveRecord last_;               // kept even with an empty ring
};

}  // namespace dtlaunch::ddp::detail
