// The shared-memory all_reduce's segment and what its set-up is decided from (shm_reduce.cpp):
// what each rank says of itself, and the segment's mapping. Not installed.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtlaunch::ddp::detail {

// What a rank publishes at group creation:
// "enabled\nhost\nboot_id\npid\nstart_ticks\nnode_rank\nacross_nodes".
struct Identity {
  bool enabled = false;
  std::string host, boot_id;
  int pid = 0;
  uint64_t start_ticks = 0;
  int node_rank = 0;
  bool across_nodes = false;

  std::string record() const;
  static Identity parse(const std::string& rec);
  // Ranks with equal keys share a node. NODE_RANK is part of it: two launches that a user
  // declared as two nodes stay two nodes, even on one machine.
  std::string node_key() const { return host + "\n" + boot_id + "\n" + std::to_string(node_rank); }
};

// A mapped segment; unmaps (and closes) on destruction.
struct Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

// Creates (rank 0) or opens the segment and maps it; "" on success, else why not.
std::string map_segment(const std::string& name, bool create, size_t size, Mapping& out);

}  // namespace dtlaunch::ddp::detail
