#include "flight/collective.hpp"

#include <algorithm>
#include <mutex>
#include <set>

#include "core/names.hpp"

namespace dtlaunch::flight {
namespace {

constexpr core::Named<Op> kOpNames[] = {{Op::kAllReduce, "all_reduce"},
                                        {Op::kBroadcast, "broadcast"},
                                        {Op::kAllGather, "all_gather"},
                                        {Op::kBarrier, "barrier"}};

constexpr core::Named<State> kStateNames[] = {
    {State::kStarted, "started"}, {State::kCompleted, "completed"}, {State::kFailed, "failed"}};

constexpr size_t kMaxDtypeName = 64, kMaxDtypeNames = 1024;

}  // namespace

static_assert(sizeof(void*) != 8 || sizeof(Collective) == 88,
              "docs/ddp.md and the settings' help give 88 bytes a ring slot");

const char* op_name(Op op) noexcept {
  return core::name_of(op, kOpNames, "collective").data();
}

const char* state_name(State state) noexcept {
  return core::name_of(state, kStateNames, "started").data();
}

std::optional<Op> op_of(std::string_view name) noexcept {
  return core::value_of(name, kOpNames);
}

std::optional<State> state_of(std::string_view name) noexcept {
  return core::value_of(name, kStateNames);
}

const char* intern_dtype(std::string_view name) {
  if (name.empty()) return "";
  if (name.size() > kMaxDtypeName) return nullptr;
  // Nodes of a std::set never move: a name's pointer stays valid for the process.
  static std::mutex mutex;
  static std::set<std::string, std::less<>> names;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(name);
  if (it == names.end()) {
    if (names.size() >= kMaxDtypeNames) return nullptr;
    it = names.emplace(name).first;
  }
  return it->c_str();
}

bool same_shape(const Collective& a, const Collective& b) noexcept {
  if (!a.shape_known() || !b.shape_known()) return true;
  return a.dims == b.dims && std::equal(a.shape.begin(), a.shape.begin() + a.dims, b.shape.begin());
}

bool same_signature(const Collective& a, const Collective& b) noexcept {
  return a.op == b.op && std::string_view(a.dtype) == b.dtype && a.numel == b.numel &&
         a.root == b.root && same_shape(a, b);
}

std::string shape_text(const Collective& c) {
  if (!c.shape_known()) return std::to_string(c.numel) + (c.numel == 1 ? " element" : " elements");
  std::string out = "[";
  for (int d = 0; d < c.dims; ++d) out += (d ? ", " : "") + std::to_string(c.shape[d]);
  return out + "]";
}

std::string signature_text(const Collective& c) {
  if (!c.has_tensor()) return op_name(c.op);
  std::string out = std::string(op_name(c.op)) + " (" + c.dtype + ", " + shape_text(c);
  if (c.root >= 0) out += ", root " + std::to_string(c.root);
  return out + ")";
}

}  // namespace dtlaunch::flight
