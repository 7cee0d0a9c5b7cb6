// The checkpoint's file without Torch (apps/train/checkpoint_file.hpp): the seal and its checks,
// and what a checkpoint path may name. Table-driven; the end-to-end cases are in train_test.
#include "checkpoint_file.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtlaunch_catch.hpp"
#include "error.hpp"
#include "test_support.hpp"

namespace dtlaunch::train {
namespace {

// The message of the Error `f` throws, and its status; "" and -1 when it throws none.
template <class F>
std::pair<std::string, int> error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.what(), e.exit_status()};
  }
  return {"", -1};
}

TEST_CASE("checkpoint file: a sealed payload comes back, any change is corruption, status 2") {
  const std::string payload = "PK\x03\x04 a zip, as far as the seal cares" + std::string(1000, 'w');
  const std::string sealed = seal_checkpoint(payload);
  const std::string n = std::to_string(payload.size());
  CHECK(sealed.rfind("dtlaunch-train checkpoint 2 size " + n + " crc32 ", 0) == 0);
  CHECK(unseal_checkpoint("ck", sealed) == payload);
  const std::size_t body = sealed.find('\n') + 1;
  struct Row {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  std::string flipped = sealed;
  flipped[body + 500] = static_cast<char>(flipped[body + 500] ^ 0x10);
  std::string header_digit = sealed;
  header_digit[sealed.find("size ") + 5] = '9';
  const std::vector<Row> rows = {
      {"a flipped bit in the payload", flipped,
       "ck: the checkpoint is corrupt (CRC-32 of its " + n + " bytes is "},
      {"cut short", sealed.substr(0, sealed.size() - 1),
       "ck: the checkpoint is corrupt (the header says " + n + " bytes follow it, the file has " +
           std::to_string(payload.size() - 1) + ")"},
      {"a byte more", sealed + "x", "the file has " + std::to_string(payload.size() + 1) + ")"},
      {"a changed size", header_digit, "ck: the checkpoint is corrupt (the header says 9"},
      {"no end of header", sealed.substr(0, body - 1), "the header line is cut or garbled"},
      {"a garbled header", "dtlaunch-train checkpoint 2 size x crc32 0\nabc",
       "the header line is garbled"},
      {"a bare zip (format 1)", payload, "ck: not a dtlaunch-train checkpoint (format 1"},
      {"another format", "dtlaunch-train checkpoint 3 size 0 crc32 00000000\n",
       "not a dtlaunch-train checkpoint (format 3, expected 2)"},
      {"something else", "hello", "ck: not a dtlaunch-train checkpoint (no checkpoint header)"},
      {"nothing", "", "not a dtlaunch-train checkpoint (no checkpoint header)"},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    const auto [message, status] = error_of([&] { unseal_checkpoint("ck", row.bytes); });
    CHECK(status == 2);
    CHECK(message.find(row.expected) != std::string::npos);
  }
}

TEST_CASE("checkpoint file: only a regular file or nothing may be at a checkpoint path") {
  dtlaunch_test::TempDir tmp;
  const std::string file = tmp / "file", fifo = tmp / "fifo", link = tmp / "link",
                    sock = tmp / "sock";
  std::ofstream(file) << "data";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::filesystem::create_symlink(file, link);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  sock.copy(addr.sun_path, sizeof addr.sun_path - 1);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  struct Row {
    std::string path;
    std::string what;  // "" when allowed
  };
  const std::vector<Row> rows = {{file, ""},
                                 {tmp / "absent", ""},
                                 {fifo, "a FIFO"},
                                 {link, "a symbolic link"},
                                 {sock, "a socket"},
                                 {tmp.path(), "a directory"},
                                 {"/dev/null", "a character device"}};
  for (const Row& row : rows) {
    INFO(row.path);
    const auto [message, status] =
        error_of([&] { refuse_unless_regular_or_absent("--checkpoint", row.path); });
    if (row.what.empty()) {
      CHECK(status == -1);
      continue;
    }
    CHECK(status == 2);
    CHECK(message == "--checkpoint '" + row.path + "': exists and is " + row.what +
                         "; a checkpoint is only read from or written to a regular file (give "
                         "the path of the file itself)");
    // Reading refuses it too, at once (a FIFO with no writer must not block), and writing
    // leaves it as it was.
    const auto started = std::chrono::steady_clock::now();
    CHECK(error_of([&] { read_regular_file(row.path, 1 << 20); }).second == 2);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
    CHECK(error_of([&] { replace_file(row.path, "new"); }).second == 2);
  }
  CHECK(dtlaunch_test::read_file(file) == "data");
  ::close(s);
}

TEST_CASE("checkpoint file: replace_file writes through a temporary file and leaves none") {
  dtlaunch_test::TempDir tmp;
  const std::string path = tmp / "ck";
  replace_file(path, "first");
  replace_file(path, "second");
  CHECK(read_regular_file(path, 100) == "second");
  CHECK(error_of([&] { read_regular_file(path, 3); }).first.find("6 bytes, more than the 3") !=
        std::string::npos);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"ck"});
  // A directory that cannot be written: status 1, naming the checkpoint.
  const auto [message, status] = error_of([&] { replace_file("/proc/ck", "x"); });
  CHECK(status == 1);
  CHECK(message.find("cannot write checkpoint /proc/ck") == 0);
}

}  // namespace
}  // namespace dtlaunch::train
