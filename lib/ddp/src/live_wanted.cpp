// The records of a live recovery that say who is wanted where (live.cpp): a survivor marks a lost
// rank wanted in the next generation; a replacement finds its generation from them.
#include "live_wanted.hpp"

#include <algorithm>
#include <charconv>

#include "core/text.hpp"
#include "internal.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {

using keys = store_keys::Live;
using std::chrono::milliseconds;

// The record that wants a rank in generation `g`: sealed with the job's key, since it ends the
// rank that reads it as replaced (docs/security.md).
std::string wanted_record(const std::optional<core::JobKey>& key, int g) {
  const std::string text = "generation " + std::to_string(g);
  return key ? core::seal_line(*key, text) : text;
}

// The generation of a wanted_record, or -1 when it is not one: no valid seal under `key`, or
// garbage.
int wanted_generation_of(const std::string& record, const std::optional<core::JobKey>& key) {
  std::string_view text = record;
  if (key) text = core::unseal_line(*key, record).value_or("");
  const std::string_view prefix = "generation ";
  if (text.substr(0, prefix.size()) != prefix) return -1;
  const std::string_view digits = text.substr(prefix.size());
  int g = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), g);
  return ec == std::errc() && end == digits.data() + digits.size() && g >= 0 ? g : -1;
}

// A replacement takes its rank's place though no survivor wanted it, in the newest generation the
// survivors are forming (the highest any valid record wants), when nobody checked in there as its
// rank. The launcher replaces a node's ranks together, but the heartbeat may name only some: a
// node cut off is "unreachable" to its watcher, and its other ranks, watched from their own node,
// are named by nobody while the re-form waits for them. The place is marked wanted as a survivor
// would, so that the rank replaced leaves when it comes back (refuse_if_replaced). Returns the
// generation, or -1.
int claim_place(const c10::intrusive_ptr<c10d::Store>& store,
                const std::optional<core::JobKey>& key, const WorkerEnv& env, const std::string& me,
                int wanted_now) {
  int g = -1;
  for (int r = 0; r < env.world_size; ++r)
    if (r != env.rank && store->check({keys::wanted(r)}))
      g = std::max(g, wanted_generation_of(text(store->get(keys::wanted(r))), key));
  if (g <= 0 || wanted_now >= g ||
      c10d::PrefixStore(keys::generation(g), store).check({store_keys::Rendezvous::rank(env.rank)}))
    return -1;
  store->set(keys::wanted(env.rank), bytes(wanted_record(key, g)));
  say("dtlaunch ddp: " + me + " takes rank " + std::to_string(env.rank) +
      "'s place in generation " + std::to_string(g) +
      ", which the survivors are forming without it named lost");
  return g;
}

// A replacement's error when no survivor wanted its rank within `wait`.
Error nobody_wanted(const std::string& me, const WorkerEnv& env, milliseconds wait) {
  return Error(ErrorKind::kTimeout,
               "dtlaunch ddp: " + me +
                   " started as a replacement (DTLAUNCH_DDP_LIVE_JOIN=1), but no survivor of the "
                   "job at " +
                   env.master_addr + ":" + std::to_string(env.master_port) + " wanted rank " +
                   std::to_string(env.rank) + " within " + core::duration_text(wait) +
                   " (DTLAUNCH_DDP_LIVE_WAIT)");
}

// The loss `cause`, when no replacement for `lost` joined the re-form within `wait` (`e`).
Error no_replacement(const Error& cause, const std::vector<int>& lost, milliseconds wait,
                     const Error& e) {
  return Error(ErrorKind::kPeerLost,
               std::string(cause.what()) + "; live recovery: no replacement for rank" +
                   (lost.size() == 1 ? " " : "s ") + format_ranks(lost) + " joined within " +
                   core::duration_text(wait) + " (DTLAUNCH_DDP_LIVE_WAIT): " + e.what());
}

}  // namespace dtlaunch::ddp::detail
