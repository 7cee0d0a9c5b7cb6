#include "stop_signal.hpp"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "error.hpp"

namespace dtlaunch::train {
namespace {

// sig_atomic_t is the only type the C++ standard guarantees a handler can write to safely.
volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_starting = 1;
void (*g_also)() noexcept = nullptr;  // set before the handler is installed

// Written by the handler with write(2), the one output call that is async-signal-safe, so the
// text is made beforehand.
std::string g_startup_message[2];

extern "C" void on_stop_signal(int sig) {
  if (g_starting) {
    const std::string& msg = g_startup_message[sig == SIGTERM ? 1 : 0];
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(kExitCheckpointed);
  }
  if (g_stop_signal == 0) g_stop_signal = sig;
  if (g_also) g_also();
}

}  // namespace

void install_stop_handlers(void (*also)() noexcept) {
  g_also = also;
  int i = 0;
  for (int sig : {SIGUSR1, SIGTERM})
    g_startup_message[i++] = "dtlaunch-train: " + std::string(strsignal(sig)) +
                             " received during start-up, before training began: nothing to "
                             "save; exiting with status " +
                             std::to_string(kExitCheckpointed) + "\n";
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGUSR1, SIGTERM})
    if (::sigaction(sig, &sa, nullptr) != 0)
      throw Error::system("sigaction(" + std::string(strsignal(sig)) + ")", errno);
}

void end_startup() noexcept {
  g_starting = 0;
}

int stop_signal_received() noexcept {
  return g_stop_signal;
}

}  // namespace dtlaunch::train
