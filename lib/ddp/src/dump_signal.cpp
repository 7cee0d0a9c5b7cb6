#include "dump_signal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include "monitor.hpp"

namespace dtlaunch::ddp::detail {
namespace {

int dump_pipe[2] = {-1, -1};
std::mutex dump_mutex;  // guards dump_monitors, and holds ~Monitor until a dump is done
std::vector<const Monitor*> dump_monitors;

extern "C" void on_dump_signal(int) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(dump_pipe[1], &byte, 1);
  errno = saved;
}

void dump_loop() {
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(dump_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(dump_mutex);
    for (const Monitor* m : dump_monitors) m->dump_on_signal();
  }
}

// Returns whether SIGUSR2 dumps.
bool install_dump_signal() {
  static const bool installed = [] {
    struct sigaction current {};
    if (::sigaction(SIGUSR2, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO) != 0)
      return false;
    if (::pipe2(dump_pipe, O_CLOEXEC) != 0) return false;
    ::fcntl(dump_pipe[1], F_SETFL, O_NONBLOCK);  // a flood of signals drops bytes, never blocks
    std::thread(dump_loop).detach();
    struct sigaction action {};
    action.sa_handler = on_dump_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    return ::sigaction(SIGUSR2, &action, nullptr) == 0;
  }();
  return installed;
}

}  // namespace

bool add_to_dumps(const Monitor* m) {
  if (!install_dump_signal()) return false;
  std::lock_guard<std::mutex> lock(dump_mutex);
  dump_monitors.push_back(m);
  return true;
}

void remove_from_dumps(const Monitor* m) {
  std::lock_guard<std::mutex> lock(dump_mutex);
  dump_monitors.erase(std::remove(dump_monitors.begin(), dump_monitors.end(), m),
                      dump_monitors.end());
}

}  // namespace dtlaunch::ddp::detail
