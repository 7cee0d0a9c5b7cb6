// How the shared-memory all_reduce (shm_reduce.cpp) cuts a tensor into chunks and a chunk into
// shares, and reduces a share. Not installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// Calls f(offset, n) for each chunk of at most per_chunk elements, at least once, so that ranks
// disagreeing on an empty tensor still meet.
template <class F>
void for_each_chunk(int64_t numel, int64_t per_chunk, F&& f) {
  int64_t offset = 0;
  do {
    const int64_t n = std::min(per_chunk, numel - offset);
    f(offset, n);
    offset += n;
  } while (offset < numel);
}

// The share [lo, hi) of a chunk of n elements that the `part`-th of `parts` ranks reduces.
// Shares start on 64-byte boundaries, so that two ranks never write one cache line; every node
// cuts a chunk alike, so share k is the same elements everywhere.
template <class T>
std::pair<int64_t, int64_t> share_of(int64_t n, int parts, int part) {
  constexpr int64_t kAlign = 64 / sizeof(T);
  const int64_t block = ((n + parts - 1) / parts + kAlign - 1) / kAlign * kAlign;
  const int64_t lo = std::min(n, block * part);
  return {lo, std::min(n, lo + block)};
}

// Reduces elements [lo, hi) of every rank's input (its slot; the caller's own chunk for the
// caller) into out[0, hi - lo), in rank order.
template <class T>
void reduce_share(T* __restrict out, const std::vector<const char*>& slots, int64_t lo, int64_t hi,
                  ReduceOp op, int world) {
  // Blocks that stay in L1 while every rank's slot is folded into them.
  constexpr int64_t kBlock = 2048;
  const T divisor = static_cast<T>(world);
  for (int64_t b = lo; b < hi; b += kBlock) {
    const int64_t e = std::min(hi, b + kBlock);
    std::memcpy(out + (b - lo), reinterpret_cast<const T*>(slots[0]) + b,
                static_cast<size_t>(e - b) * sizeof(T));
    for (size_t q = 1; q < slots.size(); ++q) {
      const T* __restrict src = reinterpret_cast<const T*>(slots[q]);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          for (int64_t i = b; i < e; ++i) out[i - lo] += src[i];
          break;
        case ReduceOp::kMin:
          for (int64_t i = b; i < e; ++i) out[i - lo] = src[i] < out[i - lo] ? src[i] : out[i - lo];
          break;
        case ReduceOp::kMax:
          for (int64_t i = b; i < e; ++i) out[i - lo] = src[i] > out[i - lo] ? src[i] : out[i - lo];
          break;
      }
    }
    // As the Gloo path does: the sum, then a true division by the world size.
    if (op == ReduceOp::kAvg)
      for (int64_t i = b; i < e; ++i) out[i - lo] /= divisor;
  }
}

}  // namespace dtlaunch::ddp::detail
