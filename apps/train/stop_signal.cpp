#include "stop_signal.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/error.hpp"

namespace dtlaunch::train {
namespace {

// sig_atomic_t is the only type the C++ standard guarantees a handler can write to safely.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGUSR1, SIGTERM})
    if (::sigaction(sig, &sa, nullptr) != 0)
      throw Error::system("sigaction(" + std::string(strsignal(sig)) + ")", errno);
}

int stop_signal_received() noexcept {
  return g_stop_signal;
}

}  // namespace dtlaunch::train
