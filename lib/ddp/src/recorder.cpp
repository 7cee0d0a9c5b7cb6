// The ring of monitor.hpp's flight recorder, and the names of what it holds.
#include "recorder.hpp"

#include <algorithm>
#include <chrono>

#include "core/names.hpp"
#include "core/text.hpp"

namespace dtlaunch::ddp::detail {
namespace {

constexpr core::Named<at::ScalarType> kDtypeNames[] = {
    {at::kFloat, "float32"},     {at::kDouble, "float64"}, {at::kHalf, "float16"},
    {at::kBFloat16, "bfloat16"}, {at::kLong, "int64"},     {at::kInt, "int32"},
    {at::kShort, "int16"},       {at::kChar, "int8"},      {at::kByte, "uint8"},
    {at::kBool, "bool"}};

// A name of static storage, as the ring's records hold it: the table's or LibTorch's own.
const char* dtype_label(at::ScalarType type) {
  return core::name_of(type, kDtypeNames, c10::toString(type)).data();
}

}  // namespace

std::string dtype_name(int8_t dtype) {
  if (dtype < 0) return "";
  return dtype_label(static_cast<at::ScalarType>(dtype));
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string seconds_text(double s) {
  return core::duration_text(std::chrono::duration<double>(s));
}

std::string signature_with_count(const CollectiveRecord& r) {
  std::string out = op_name(r.op);
  if (!r.has_tensor()) return out;
  out += std::string(" (") + r.dtype + ", " + std::to_string(r.numel) +
         (r.numel == 1 ? " element" : " elements");
  if (r.root >= 0) out += ", root " + std::to_string(r.root);
  return out + ")";
}

std::string describe(const CollectiveRecord& r) {
  std::string sig = signature_with_count(r);
  const auto space = sig.find(' ');
  if (space == std::string::npos) return sig + " #" + std::to_string(r.seq);
  return sig.substr(0, space) + " #" + std::to_string(r.seq) + sig.substr(space);
}

CollectiveRecord* FlightRecorder::slot(uint64_t seq) {
  if (capacity_ == 0 || seq == 0) return nullptr;
  const size_t i = (seq - 1) % capacity_;
  if (i >= ring_.size()) return nullptr;
  return ring_[i].seq == seq ? &ring_[i] : nullptr;
}

uint64_t FlightRecorder::begin(Op op, const at::Tensor* tensor, int root) {
  CollectiveRecord r;
  r.seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  r.op = op;
  if (tensor != nullptr) {
    r.dtype = dtype_label(tensor->scalar_type());
    r.numel = tensor->numel();
    if (tensor->dim() <= kMaxShapeDims) {
      r.dims = static_cast<int8_t>(tensor->dim());
      for (int d = 0; d < tensor->dim(); ++d) r.shape[d] = tensor->size(d);
    }
  }
  r.root = root;
  r.enqueue_us = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ > 0) {
    // Slots are allocated as entries arrive (vector growth), not at init: a large
    // DTLAUNCH_DDP_TRACE_ENTRIES costs nothing until that many collectives ran.
    const size_t i = (r.seq - 1) % capacity_;
    if (i >= ring_.size()) {
      if (ring_.capacity() <= i)
        ring_.reserve(std::min(capacity_, std::max<size_t>(64, 2 * (i + 1))));
      ring_.resize(i + 1);
    }
    ring_[i] = r;
  }
  if (r.seq > last_.seq) last_ = r;
  return r.seq;
}

void FlightRecorder::handed_to_backend(uint64_t seq) {
  const int64_t t = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (CollectiveRecord* r = slot(seq)) r->start_us = t;
  if (last_.seq == seq) last_.start_us = t;
}

void FlightRecorder::end(uint64_t seq, bool ok) {
  const int64_t t = now_us();
  const auto state = ok ? CollectiveRecord::State::kCompleted : CollectiveRecord::State::kFailed;
  std::lock_guard<std::mutex> lock(mutex_);
  // A failure is recorded once, when the error is known (before its file is written).
  if (CollectiveRecord* r = slot(seq);
      r != nullptr && r->state != CollectiveRecord::State::kFailed) {
    r->end_us = t;
    r->state = state;
  }
  if (last_.seq == seq && last_.state != CollectiveRecord::State::kFailed) {
    last_.end_us = t;
    last_.state = state;
  }
}

size_t FlightRecorder::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ring_.capacity() * sizeof(CollectiveRecord);
}

CollectiveRecord FlightRecorder::find(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (last_.seq == seq) return last_;
  if (const CollectiveRecord* r = const_cast<FlightRecorder*>(this)->slot(seq)) return *r;
  CollectiveRecord r;
  r.seq = seq;
  return r;
}

CollectiveRecord FlightRecorder::last() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_;
}

std::vector<CollectiveRecord> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> out;
  out.reserve(ring_.size());
  for (const auto& r : ring_)
    if (r.seq != 0) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

}  // namespace dtlaunch::ddp::detail
