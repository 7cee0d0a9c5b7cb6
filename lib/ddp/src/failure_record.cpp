#include "failure_record.hpp"

#include <span>

#include "contract/contract.hpp"
#include "core/text.hpp"

namespace dtlaunch::ddp::detail {
namespace {

std::string seal(int kind, const std::string& message, const core::JobKey& key) {
  const std::string text = std::to_string(kind) + "\n" + message;
  return core::to_hex(core::hmac_sha256(
      key.bytes,
      {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())}));
}

}  // namespace

std::string encode_failure(int kind, const std::string& message,
                           const std::optional<core::JobKey>& key) {
  return std::to_string(kind) + (key ? " " + seal(kind, message, *key) : "") + "\n" + message;
}

FailureRecord decode_failure(const std::string& record, const std::optional<core::JobKey>& key) {
  FailureRecord r;
  r.kind = -1;
  const size_t nl = record.find('\n');
  const std::string head = record.substr(0, nl);
  const std::string message = nl == std::string::npos ? record : record.substr(nl + 1);
  const size_t space = head.find(' ');
  const std::string kind = head.substr(0, space);
  for (int k = 0; k < 16 && !kind.empty(); ++k)
    if (kind == std::to_string(k)) r.kind = k;
  if (key) {
    const std::string mac = space == std::string::npos ? "" : head.substr(space + 1);
    const std::string want = seal(r.kind, message, *key);
    r.forged =
        kind != std::to_string(r.kind) ||
        !core::equal_constant_time(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mac.data()), mac.size()),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(want.data()), want.size()));
  }
  r.message = core::excerpt(message.substr(0, message.find('\n')), 2000, core::Quote::kNone);
  return r;
}

std::string forged_failure_line(const std::string& who, const FailureRecord& forged) {
  return "dtlaunch ddp: " + who + ": a forged failure record was ignored (\"" +
         core::excerpt(forged.message, 200, core::Quote::kDouble) +
         "\": not sealed with the job key; docs/security.md)";
}

std::optional<core::JobKey> job_key_of(const std::string& hex) {
  if (hex.empty()) return std::nullopt;
  return core::parse_job_key(hex, contract::env_var::kJobKey);
}

}  // namespace dtlaunch::ddp::detail
