// SHA-256 against FIPS 180-4's examples (and NIST's one million 'a'), HMAC-SHA256 against every
// test case of RFC 4231, the constant-time compare and the job key's hex form.
#include "core/hmac.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch::core;

namespace {
std::vector<uint8_t> bytes(std::string_view s) {
  return {s.begin(), s.end()};
}
std::vector<uint8_t> repeat(uint8_t b, size_t n) {
  return std::vector<uint8_t>(n, b);
}
}  // namespace

TEST_CASE("sha256 gives FIPS 180-4's and NIST's digests") {
  struct Case {
    std::vector<uint8_t> in;
    std::string digest;
  };
  const Case cases[] = {
      {bytes(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {bytes("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {repeat('a', 1'000'000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
      // 55 and 56 bytes: the length just fits in the last block, or does not.
      {repeat('a', 55), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {repeat('a', 56), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
  };
  for (const Case& c : cases) CHECK(to_hex(sha256(c.in)) == c.digest);
  Sha256 pieces;  // the same digest in pieces that straddle the blocks
  for (int i = 0; i < 1000; ++i) pieces.update(std::string(1000, 'a'));
  CHECK(to_hex(pieces.finish()) == cases[3].digest);
}

TEST_CASE("hmac_sha256 gives RFC 4231's test cases 1 to 7") {
  std::vector<uint8_t> key4;
  for (uint8_t b = 1; b <= 25; ++b) key4.push_back(b);
  struct Case {
    std::vector<uint8_t> key, data;
    std::string mac;  // case 5's is truncated to 128 bits, as the RFC gives it
  };
  const Case cases[] = {
      {repeat(0x0b, 20), bytes("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {bytes("Jefe"), bytes("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {repeat(0xaa, 20), repeat(0xdd, 50),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, repeat(0xcd, 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {repeat(0x0c, 20), bytes("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"},
      {repeat(0xaa, 131), bytes("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {repeat(0xaa, 131),
       bytes("This is a test using a larger than block-size key and a larger than block-size "
             "data. The key needs to be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const Case& c : cases) {
    const std::string mac = to_hex(hmac_sha256(c.key, {c.data}));
    CHECK(mac.substr(0, c.mac.size()) == c.mac);
  }
  // Parts are concatenated.
  const std::vector<uint8_t> a = bytes("what do ya "), b = bytes("want for nothing?");
  CHECK(to_hex(hmac_sha256(bytes("Jefe"), {a, b})) == cases[1].mac);
}

TEST_CASE("equal_constant_time compares bytes and lengths") {
  CHECK(equal_constant_time(bytes("abc"), bytes("abc")));
  CHECK_FALSE(equal_constant_time(bytes("abc"), bytes("abd")));
  CHECK_FALSE(equal_constant_time(bytes("abc"), bytes("ab")));
  CHECK(equal_constant_time(bytes(""), bytes("")));
}

TEST_CASE("a job key is random and round-trips through 64 hex digits") {
  const JobKey a = make_job_key(), b = make_job_key();
  CHECK_FALSE(a == b);
  CHECK(to_hex(a).size() == 64);
  CHECK(parse_job_key(to_hex(a), "DTLAUNCH_JOB_KEY") == a);
  CHECK(parse_job_key(std::string(64, 'F'), "K").bytes[31] == 0xff);
  struct Bad {
    std::string value, line;
  };
  const Bad bad[] = {
      {"", "DTLAUNCH_JOB_KEY must be 64 hex digits (got 0 characters)"},
      {std::string(63, '0'), "DTLAUNCH_JOB_KEY must be 64 hex digits (got 63 characters)"},
      {std::string(62, '0') + "g0",
       "DTLAUNCH_JOB_KEY must be 64 hex digits (a non-hex character at 62)"},
      {std::string(63, '0') + "\x1b",
       "DTLAUNCH_JOB_KEY must be 64 hex digits (a non-hex character at 63)"},
  };
  for (const Bad& c : bad) {
    try {
      parse_job_key(c.value, "DTLAUNCH_JOB_KEY");
      FAIL("accepted: " << c.value);
    } catch (const Error& e) {
      CHECK(e.what() == c.line);
      CHECK(e.code() == ExitCode::kBadInput);
    }
  }
}

TEST_CASE("a sealed line: believed under its attempt's key only, whole and as written") {
  const JobKey key = make_job_key(), other = make_job_key();
  const std::string text = "dtlaunch ddp: rank 0 (cn1): peer lost: rank 2 (cn3) exited";
  const std::string line = seal_line(key, text);
  REQUIRE(line.size() == text.size() + 40);
  CHECK(line.substr(text.size(), 7) == " [seal ");
  CHECK(unseal_line(key, line) == std::optional<std::string_view>(text));
  CHECK(unseal_line(key, line + "\r") == std::optional<std::string_view>(text));
  CHECK(unseal_line(key, seal_line(key, "")) == std::optional<std::string_view>(""));
  struct Refused {
    std::string line, why;
  };
  std::string flipped = line;
  flipped[text.size() + 10] = flipped[text.size() + 10] == '0' ? '1' : '0';
  std::string edited = line;
  edited[text.find("rank 2")] = 'R';
  const Refused refused[] = {
      {text, "no seal"},
      {seal_line(other, text), "another attempt's key"},
      {flipped, "a seal digit changed"},
      {edited, "the text changed"},
      {line + " ", "something after the seal"},
      {"x" + line.substr(text.size()), "a seal moved onto other text"},
      {line.substr(0, line.size() - 1), "the closing bracket missing"},
      {text + " [seal " + std::string(32, 'z') + "]", "not hex"},
      {line.substr(text.size() + 1), "the seal alone, without its space"},
  };
  for (const Refused& r : refused) {
    INFO(r.why);
    CHECK_FALSE(unseal_line(key, r.line).has_value());
  }
}
