#include "core/hmac.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "core/error.hpp"

namespace dtlaunch::core {
namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const uint8_t* p) {
  std::array<uint32_t, 64> w;
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 |
           uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 =
        h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
}

void Sha256::update(std::span<const uint8_t> bytes) {
  total_ += bytes.size();
  for (const uint8_t byte : bytes) {
    buf_[used_++] = byte;
    if (used_ == buf_.size()) {
      block(buf_.data());
      used_ = 0;
    }
  }
}

void Sha256::update(std::string_view text) {
  update({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Digest Sha256::finish() {
  const uint64_t bits = total_ * 8;
  const uint8_t one = 0x80, zero = 0;
  update({&one, 1});
  while (used_ != 56) update({&zero, 1});
  std::array<uint8_t, 8> length;
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(length);
  Digest out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
  return out;
}

Digest sha256(std::span<const uint8_t> bytes) {
  Sha256 s;
  s.update(bytes);
  return s.finish();
}

Digest hmac_sha256(std::span<const uint8_t> key,
                   std::initializer_list<std::span<const uint8_t>> parts) {
  std::array<uint8_t, 64> k{};
  if (key.size() > k.size()) {
    const Digest d = sha256(key);
    std::copy(d.begin(), d.end(), k.begin());
  } else {
    std::copy(key.begin(), key.end(), k.begin());
  }
  std::array<uint8_t, 64> pad;
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = k[i] ^ 0x36;
  Sha256 inner;
  inner.update(pad);
  for (const auto& part : parts) inner.update(part);
  const Digest inner_digest = inner.finish();
  for (size_t i = 0; i < pad.size(); ++i) pad[i] = k[i] ^ 0x5c;
  Sha256 outer;
  outer.update(pad);
  outer.update(inner_digest);
  return outer.finish();
}

bool equal_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

JobKey make_job_key() {
  JobKey key;
  size_t got = 0;
  while (got < key.bytes.size()) {
    const ssize_t n = ::getrandom(key.bytes.data() + got, key.bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<size_t>(n);
  }
  return key;
}

std::string to_hex(const JobKey& key) {
  return to_hex(std::span<const uint8_t>(key.bytes));
}

JobKey parse_job_key(std::string_view hex, std::string_view variable) {
  JobKey key;
  const std::string name(variable);
  if (hex.size() != key.bytes.size() * 2)
    throw Error(ExitCode::kBadInput, name + " must be 64 hex digits (got " +
                                         std::to_string(hex.size()) + " characters)");
  for (size_t i = 0; i < key.bytes.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      throw Error(ExitCode::kBadInput, name + " must be 64 hex digits (a non-hex character at " +
                                           std::to_string(hi < 0 ? 2 * i : 2 * i + 1) + ")");
    key.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return key;
}

namespace {

constexpr std::string_view kSealOpen = " [seal ";
constexpr size_t kSealBytes = 16;

std::array<uint8_t, kSealBytes> seal_of(const JobKey& key, std::string_view text) {
  // The context keeps a line's seal from being anything else made with the same key.
  constexpr std::string_view kContext = "dtlaunch sealed line 1\n";
  const auto bytes = [](std::string_view s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const Digest mac = hmac_sha256(key.bytes, {bytes(kContext), bytes(text)});
  std::array<uint8_t, kSealBytes> out{};
  std::copy_n(mac.begin(), kSealBytes, out.begin());
  return out;
}

}  // namespace

std::string seal_line(const JobKey& key, std::string_view text) {
  return std::string(text) + std::string(kSealOpen) + to_hex(seal_of(key, text)) + "]";
}

std::optional<std::string_view> unseal_line(const JobKey& key, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t tail = kSealOpen.size() + 2 * kSealBytes + 1;
  if (line.size() < tail || line.back() != ']') return std::nullopt;
  const std::string_view text = line.substr(0, line.size() - tail);
  if (line.substr(text.size(), kSealOpen.size()) != kSealOpen) return std::nullopt;
  const std::string_view hex = line.substr(text.size() + kSealOpen.size(), 2 * kSealBytes);
  std::array<uint8_t, kSealBytes> given{};
  for (size_t i = 0; i < kSealBytes; ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    given[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (!equal_constant_time(given, seal_of(key, text))) return std::nullopt;
  return text;
}

}  // namespace dtlaunch::core
