// One collective as the flight record knows it: the DDP runtime's ring holds these, its files
// carry them, and `dtlaunch trace` reads them back (docs/ddp.md, "The flight recorder"). No
// LibTorch: the runtime names the tensor's dtype, this module only carries the name.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtlaunch::flight {

enum class Op : uint8_t { kAllReduce, kBroadcast, kAllGather, kBarrier };
enum class State : uint8_t { kStarted, kCompleted, kFailed };

// The shape is kept up to this many dimensions; beyond, only the element count.
inline constexpr int kMaxShapeDims = 4;

// 88 bytes (the ring's cost per slot, docs/ddp.md): the dtype is a name of static storage, so
// that recording one costs no allocation.
struct Collective {
  using State = flight::State;

  uint64_t seq = 0;  // 0: an empty slot
  Op op = Op::kBarrier;
  State state = State::kStarted;
  int8_t dims = -1;  // the shape's rank; -1: no tensor, or more than kMaxShapeDims
  int root = -1;
  // "float32", ...; "" without a tensor (a barrier). Static storage: a literal, LibTorch's own
  // names, or intern_dtype's.
  const char* dtype = "";
  int64_t numel = 0;
  std::array<int64_t, kMaxShapeDims> shape{};
  // Microseconds since the epoch on the writing rank's clock; 0: not (yet) there.
  int64_t enqueue_us = 0;  // the program called the runtime
  int64_t start_us = 0;    // handed to the backend
  int64_t end_us = 0;      // the rank saw it finish

  bool has_tensor() const noexcept { return dtype[0] != '\0'; }
  bool shape_known() const noexcept { return dims >= 0; }
};

// "all_reduce", "broadcast", "all_gather", "barrier".
const char* op_name(Op op) noexcept;
// "started", "completed", "failed".
const char* state_name(State state) noexcept;
// The value of a name, for the reader; nullopt for any other name.
std::optional<Op> op_of(std::string_view name) noexcept;
std::optional<State> state_of(std::string_view name) noexcept;
// The name as a string of static storage, the same pointer for the same name, or nullptr for a
// name over 64 bytes or beyond the first 1,024 distinct ones (a corrupt file must not make the
// reader keep what it likes).
const char* intern_dtype(std::string_view name);

// Same operation, dtype, count, root and (where both are known) shape: what ranks must agree on.
bool same_signature(const Collective& a, const Collective& b) noexcept;
bool same_shape(const Collective& a, const Collective& b) noexcept;  // true where one is unknown
// "[4, 2]", or "4 elements" when the shape is unknown.
std::string shape_text(const Collective& c);
// "all_reduce (float32, [4])", "broadcast (float32, [10], root 0)", "barrier".
std::string signature_text(const Collective& c);

}  // namespace dtlaunch::flight
