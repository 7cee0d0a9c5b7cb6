// The runtime's keys in the store that rank 0 hosts at MASTER_ADDR:MASTER_PORT, in one place.
// Each component writes under a prefix of its own, as Gloo gives each of its contexts one: no
// two components can collide, and a key in the store says whose it is. The strings are part of
// the wire: ranks built from another dtlaunch version meet in the same store, so a key keeps its
// spelling.
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
struct Rendezvous {
  static constexpr std::string_view kPrefix = "dtlaunch/rdzv/";
  static std::string count() { return join(kPrefix, "count"); }
  static std::string failed() { return join(kPrefix, "failed"); }
  static std::string failed_seen() { return join(kPrefix, "failed_seen"); }
  static std::string identity() { return join(kPrefix, "identity"); }
  static std::string hosts() { return join(kPrefix, "hosts"); }
  static std::string refused() { return join(kPrefix, "refused"); }
  static std::string foreign_count() { return join(kPrefix, "foreign"); }
  static std::string done() { return join(kPrefix, "done"); }
  static std::string rank(int rank) { return join(kPrefix, "rank", rank); }
  static std::string claim(int rank) { return join(kPrefix, "claim", rank); }
  static std::string settings(int rank) { return join(kPrefix, "settings", rank); }
  static std::string foreign(std::int64_t n) { return join(kPrefix, "foreign", n); }
};

// The heartbeat's endpoints (peer_watch.cpp): "dtlaunch/heartbeat/RANK".
struct Heartbeat {
  static constexpr std::string_view kPrefix = "dtlaunch/heartbeat/";
  static std::string endpoint(int rank) { return join(kPrefix, std::to_string(rank)); }
};

// The shared-memory all_reduce's set-up (shm_reduce.cpp): each rank's identity, each node's
// segment (named by the node's first rank), and whether each rank and each node mapped it.
struct Shm {
  static constexpr std::string_view kPrefix = "dtlaunch/shm/";
  static std::string id(int rank) { return join(kPrefix, "id", rank); }
  static std::string segment(int leader) { return join(kPrefix, "segment", leader); }
  static std::string mapped(int rank) { return join(kPrefix, "mapped", rank); }
  // Across nodes: whether the node whose first rank is `leader` has its segment.
  static std::string node(int leader) { return join(kPrefix, "node", leader); }
};

// The hierarchical all_reduce's groups among nodes (gloo_group.cpp): one Gloo group per slice,
// under "dtlaunch/hier/SLICE/".
struct Hier {
  static std::string slice_prefix(int slice) {
    return "dtlaunch/hier/" + std::to_string(slice) + "/";
  }
};

// Live recovery (live.cpp): each generation's rendezvous and groups under "dtlaunch/live/G/", and
// for each lost rank the generation in which its replacement is awaited.
struct Live {
  static constexpr std::string_view kPrefix = "dtlaunch/live/";
  static std::string generation(int generation) {
    return join(kPrefix, std::to_string(generation)) + "/";
  }
  static std::string wanted(int rank) { return join(kPrefix, "wanted", rank); }
  // Rank 0's executable digest and state layout, which a replacement must share.
  static std::string program() { return join(kPrefix, "program"); }
};

// NCCL's communicator (nccl_group.cpp): rank 0's unique id, and who joined and finished init.
struct Nccl {
  static constexpr std::string_view kPrefix = "dtlaunch/nccl/";
  static std::string unique_id() { return join(kPrefix, "unique_id"); }
  static std::string joined(int rank) { return join(kPrefix, "joined", rank); }
  static std::string ready(int rank) { return join(kPrefix, "ready", rank); }
};

// The diagnostics (monitor.cpp and its parts): each rank's check-in record (where it runs, when it
// came), the rank report's rounds (asks, each rank's position per round, who is still
// reporting), and the clock alignment's exchanges with rank 0.
struct Diag {
  static constexpr std::string_view kPrefix = "dtlaunch/diag/";
  static std::string checkin(int rank) { return join(kPrefix, "checkin", rank); }
  static std::string asks() { return join(kPrefix, "asks"); }
  static std::string reporting() { return join(kPrefix, "reporting"); }
  static std::string ask(std::int64_t round) { return join(kPrefix, "ask", round); }
  static std::string position(std::int64_t round, int rank) {
    return join(kPrefix, "pos", round) + "/" + std::to_string(rank);
  }
  // what: "go", "ask" or "time".
  static std::string clock(std::string_view what, int rank, int round) {
    return join(kPrefix, std::string("clock/").append(what), rank) + "/" + std::to_string(round);
  }
};

// Gloo's own keys, through a c10d::PrefixStore, which puts its "/" after the prefix.
struct Gloo {
  static inline const std::string kPrefix = "dtlaunch/gloo";
};

}  // namespace dtlaunch::ddp::detail::store_keys
