// The runtime's keys in the store that rank 0 hosts at MASTER_ADDR:MASTER_PORT, in one place.
// Each component writes under a prefix of its own, as Gloo gives each of its contexts one: no
// two components can collide, and a key in the store says whose it is. The strings are part of
// the wire: ranks built from another dtlaunch version meet in the same store, so a key keeps its
// spelling. The flight recorder's keys (dtlaunch/diag/) are still the monitor's (monitor.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtlaunch::ddp::detail::store_keys {

// PREFIX + NAME, and PREFIX + NAME/N for rank (or number) N's record.
inline std::string join(std::string_view prefix, std::string_view name) {
  return std::string(prefix).append(name);
}
inline std::string join(std::string_view prefix, std::string_view name, std::int64_t n) {
  return join(prefix, name) + "/" + std::to_string(n);
}

// The rendezvous (rendezvous.cpp): the check-in count, each rank's claim, identity and agreed
// settings, a failure and its acknowledgement, ranks of another job, the end.
namespace rdzv {
inline constexpr std::string_view kPrefix = "dtlaunch/rdzv/";
inline std::string count() {
  return join(kPrefix, "count");
}
inline std::string failed() {
  return join(kPrefix, "failed");
}
inline std::string failed_seen() {
  return join(kPrefix, "failed_seen");
}
inline std::string identity() {
  return join(kPrefix, "identity");
}
inline std::string hosts() {
  return join(kPrefix, "hosts");
}
inline std::string refused() {
  return join(kPrefix, "refused");
}
inline std::string foreign_count() {
  return join(kPrefix, "foreign");
}
inline std::string done() {
  return join(kPrefix, "done");
}
inline std::string rank(int rank) {
  return join(kPrefix, "rank", rank);
}
inline std::string claim(int rank) {
  return join(kPrefix, "claim", rank);
}
inline std::string settings(int rank) {
  return join(kPrefix, "settings", rank);
}
inline std::string foreign(std::int64_t n) {
  return join(kPrefix, "foreign", n);
}
}  // namespace rdzv

// The heartbeat's endpoints (peer_watch.cpp): "dtlaunch/heartbeat/RANK".
namespace heartbeat {
inline constexpr std::string_view kPrefix = "dtlaunch/heartbeat/";
inline std::string endpoint(int rank) {
  return join(kPrefix, std::to_string(rank));
}
}  // namespace heartbeat

// The shared-memory all_reduce's set-up (shm_reduce.cpp): each rank's identity, rank 0's
// segment, and whether each rank mapped it.
namespace shm {
inline constexpr std::string_view kPrefix = "dtlaunch/shm/";
inline std::string id(int rank) {
  return join(kPrefix, "id", rank);
}
inline std::string segment() {
  return join(kPrefix, "segment");
}
inline std::string mapped(int rank) {
  return join(kPrefix, "mapped", rank);
}
}  // namespace shm

// NCCL's communicator (nccl_group.cpp): rank 0's unique id, and who joined and finished init.
namespace nccl {
inline constexpr std::string_view kPrefix = "dtlaunch/nccl/";
inline std::string unique_id() {
  return join(kPrefix, "unique_id");
}
inline std::string joined(int rank) {
  return join(kPrefix, "joined", rank);
}
inline std::string ready(int rank) {
  return join(kPrefix, "ready", rank);
}
}  // namespace nccl

// Gloo's own keys, through a c10d::PrefixStore, which puts its "/" after the prefix.
namespace gloo {
inline const std::string kPrefix = "dtlaunch/gloo";
}  // namespace gloo

}  // namespace dtlaunch::ddp::detail::store_keys
