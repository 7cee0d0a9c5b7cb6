#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"
#include "launch/system.hpp"

namespace {

// Binds addr:port for real: the port find_free_port returned is usable.
bool can_bind(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok =
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("find_free_port returns a port that can be bound", "[proc]") {
  for (const char* addr : {"127.0.0.1", "localhost"}) {
    const std::uint16_t port = dtlaunch::launch::find_free_port(addr);
    CHECK(port >= 1024);
    CHECK(can_bind(port));
  }
}

TEST_CASE("find_free_port rejects an address that does not resolve", "[proc]") {
  try {
    dtlaunch::launch::find_free_port("256.1.2.3.invalid");
    FAIL("no error");
  } catch (const dtlaunch::core::Error& e) {
    CHECK(e.code() == dtlaunch::core::ExitCode::kBadInput);
    CHECK(std::string(e.what()).find("'256.1.2.3.invalid' does not resolve") != std::string::npos);
  }
}
