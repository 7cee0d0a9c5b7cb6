// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written from the specifications because the
// launcher ships as one self-contained file (no OpenSSL), and the job key that authenticates
// the heartbeat's frames to the job (docs/security.md).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace dtlaunch::core {

using Digest = std::array<uint8_t, 32>;

// A streaming SHA-256.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  Digest finish();  // the object is spent afterwards

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(std::span<const uint8_t> bytes);

// HMAC-SHA256 of the concatenation of `parts` under `key` (any length).
Digest hmac_sha256(std::span<const uint8_t> key,
                   std::initializer_list<std::span<const uint8_t>> parts);

// Whether a and b hold the same bytes, in a time that does not depend on where they differ.
bool equal_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b);

std::string to_hex(std::span<const uint8_t> bytes);

// The per-job secret (DTLAUNCH_JOB_KEY): 32 bytes, 64 hex digits in the environment.
struct JobKey {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const JobKey&) const = default;
};
// 32 bytes from getrandom(2). Throws std::system_error.
JobKey make_job_key();
std::string to_hex(const JobKey& key);
// Throws Error (bad input) with one line naming `variable`: "DTLAUNCH_JOB_KEY must be 64 hex
// digits (got 12 characters)"; the value itself is never quoted, being a secret.
JobKey parse_job_key(std::string_view hex, std::string_view variable);

// A line of a task's output that `dtlaunch job` may believe (docs/security.md): the text, then
// " [seal HEX]", HEX being 32 hex digits of HMAC-SHA256(key, a fixed context, the text). The key
// is the attempt's, fresh each time and known only to the job's processes: a line the program
// prints itself, another job's, or an old attempt's replayed from a log carries no valid seal.
std::string seal_line(const JobKey& key, std::string_view text);
// The text of `line` when it ends with a seal valid under `key` (a '\r' after it is allowed);
// nullopt for any other line.
std::optional<std::string_view> unseal_line(const JobKey& key, std::string_view line);

}  // namespace dtlaunch::core
