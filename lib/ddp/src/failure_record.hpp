// The record rank 0 publishes under dtlaunch/rdzv/failed before it gives up, so that every rank
// reports its diagnosis. Anyone who reaches the store (docs/security.md: PyTorch's TCPStore is
// unauthenticated) can write that key: with a job key the record is sealed (HMAC-SHA256 over its
// text), and its text is escaped wherever it came from.
#pragma once

#include <optional>
#include <string>

#include "core/hmac.hpp"

namespace dtlaunch::ddp::detail {

struct FailureRecord {
  int kind = -1;        // -1: not a number the encoder writes
  std::string message;  // its first line, control characters escaped
  bool forged = false;  // a key was expected and the record's MAC is missing or wrong
};

// "KIND MAC\nMESSAGE"; MAC (64 hex digits) only with a key.
std::string encode_failure(int kind, const std::string& message,
                           const std::optional<core::JobKey>& key);
FailureRecord decode_failure(const std::string& record, const std::optional<core::JobKey>& key);
// The one line a rank (`who`: "rank 3") says when it ignores a forged record, its text escaped.
std::string forged_failure_line(const std::string& who, const FailureRecord& forged);
// DTLAUNCH_JOB_KEY's value as WorkerEnv holds it, already checked; "" gives none.
std::optional<core::JobKey> job_key_of(const std::string& hex);

}  // namespace dtlaunch::ddp::detail
