// core's POSIX basics: owned descriptors and whole writes, the host name, connects with a
// deadline and the scan of this process's sockets.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.hpp"
#include "core/host.hpp"
#include "core/socket.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch::core;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

UniqueFd loopback_socket() {
  return UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
}

// A TCP socket bound to 127.0.0.1 on a free port; listening with `backlog` unless it is < 0.
UniqueFd bound_socket(int backlog) {
  UniqueFd fd = loopback_socket();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  if (backlog >= 0) REQUIRE(::listen(fd.get(), backlog) == 0);
  return fd;
}

// The address of `fd`'s own end, as getaddrinfo would give it to a client.
struct Address {
  sockaddr_in in{};
  addrinfo info{};
};
Address address_of(int fd) {
  Address a;
  socklen_t len = sizeof a.in;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a.in), &len) == 0);
  a.info.ai_family = AF_INET;
  a.info.ai_socktype = SOCK_STREAM;
  a.info.ai_protocol = IPPROTO_TCP;
  a.info.ai_addr = reinterpret_cast<sockaddr*>(&a.in);
  a.info.ai_addrlen = sizeof a.in;
  return a;
}

}  // namespace

TEST_CASE("UniqueFd closes its descriptor when it goes and when it is moved over") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  {
    UniqueFd read(fds[0]);
    UniqueFd write(fds[1]);
    UniqueFd moved = std::move(write);
    CHECK_FALSE(write);
    CHECK(moved.get() == fds[1]);
    moved = std::move(read);  // closes the write end
    CHECK(moved.get() == fds[0]);
    CHECK(::fcntl(fds[1], F_GETFD) == -1);
  }
  CHECK(::fcntl(fds[0], F_GETFD) == -1);
}

TEST_CASE("write_all writes a whole buffer through a non-blocking pipe a reader drains slowly") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
  UniqueFd read(fds[0]), write(fds[1]);
  std::string data(1 << 20, '\0');  // far more than a pipe holds (64 KiB)
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    while (got.size() < data.size()) {
      pollfd p{read.get(), POLLIN, 0};
      ::poll(&p, 1, 1000);
      const ssize_t n = ::read(read.get(), buf, sizeof buf);
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
      if (n == 0) break;
    }
  });
  CHECK(write_all(write.get(), data));
  write.reset();
  reader.join();
  CHECK(got == data);
}

TEST_CASE("write_all says EPIPE when the pipe's reader is gone") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd write(fds[1]);
  ::close(fds[0]);
  // SIGPIPE held back on this thread, then taken, so that the process does not end.
  sigset_t pipe_signal, before;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &pipe_signal, &before) == 0);
  const bool ok = write_all(write.get(), "lost");
  const int error = errno;
  const timespec none{0, 0};
  ::sigtimedwait(&pipe_signal, nullptr, &none);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  CHECK_FALSE(ok);
  CHECK(error == EPIPE);
}

TEST_CASE("host_name is the kernel's node name, short_host_name its part before the first dot") {
  utsname u{};
  REQUIRE(::uname(&u) == 0);
  const std::string full = host_name("?");
  CHECK(full == u.nodename);
  const std::string shortened = short_host_name("?");
  CHECK_FALSE(shortened.empty());
  CHECK(shortened.find('.') == std::string::npos);
  CHECK(full.compare(0, shortened.size(), shortened) == 0);
}

TEST_CASE("connect_until connects to a listener, and says -ECONNREFUSED where none listens") {
  const UniqueFd listener = bound_socket(8);
  Address a = address_of(listener.get());
  const UniqueFd connected(connect_until(a.info, Clock::now() + std::chrono::seconds(5)));
  REQUIRE(connected.get() >= 0);
  CHECK(peer_port(connected.get()) == ntohs(a.in.sin_port));
  CHECK((::fcntl(connected.get(), F_GETFL) & O_NONBLOCK) != 0);
  CHECK((::fcntl(connected.get(), F_GETFD) & FD_CLOEXEC) != 0);

  // Bound but not listening: the port stays ours, and a connection to it is refused.
  const UniqueFd closed_port = bound_socket(-1);
  a = address_of(closed_port.get());
  CHECK(connect_until(a.info, Clock::now() + std::chrono::seconds(5)) == -ECONNREFUSED);
  // The same answer by start_connect and connect_error, as a caller with its own poll() gets it.
  const UniqueFd started(start_connect(a.info));
  if (started.get() >= 0) {
    pollfd p{started.get(), POLLOUT, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    CHECK(connect_error(started.get()) == ECONNREFUSED);
  } else {
    CHECK(started.get() == -ECONNREFUSED);
  }
}

TEST_CASE("connect_until gives up with -ETIMEDOUT by its cap when no SYN is answered") {
  // A listener that never accepts, with its accept queue full: Linux drops a further SYN
  // (tcp_abort_on_overflow is 0 by default) rather than refusing it, as a host that is gone does.
  const UniqueFd listener = bound_socket(0);
  const Address a = address_of(listener.get());
  std::vector<UniqueFd> queued;
  int result = 0;
  auto waited = milliseconds(0);
  for (int i = 0; i < 8 && result != -ETIMEDOUT; ++i) {
    const auto start = Clock::now();
    result = connect_until(a.info, Clock::now() + std::chrono::seconds(30), milliseconds(300));
    waited = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    if (result >= 0) queued.emplace_back(result);
  }
  REQUIRE(result == -ETIMEDOUT);
  CHECK(waited >= milliseconds(290));
  CHECK(waited < milliseconds(5000));
  // A deadline already past still gives a connection 1 ms: the answer is the same, at once.
  const auto start = Clock::now();
  CHECK(connect_until(a.info, Clock::now() - std::chrono::seconds(1)) == -ETIMEDOUT);
  CHECK(Clock::now() - start < milliseconds(1000));
}

TEST_CASE("open_sockets lists this process's sockets, and peer_port the port each reaches") {
  const UniqueFd listener = bound_socket(8);
  const Address a = address_of(listener.get());
  const UniqueFd client(connect_until(a.info, Clock::now() + std::chrono::seconds(5)));
  REQUIRE(client.get() >= 0);
  const UniqueFd not_a_socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const std::set<OpenSocket> sockets = open_sockets();
  auto has = [&](int fd) {
    for (const OpenSocket& s : sockets)
      if (s.fd == fd) return true;
    return false;
  };
  CHECK(has(listener.get()));
  CHECK(has(client.get()));
  CHECK_FALSE(has(not_a_socket.get()));
  CHECK(peer_port(client.get()) == ntohs(a.in.sin_port));
  CHECK(peer_port(listener.get()) == -1);
  CHECK(peer_port(not_a_socket.get()) == -1);
}
