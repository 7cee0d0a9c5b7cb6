// dtlaunch-store: hosts a job's rendezvous store in a process of its own, so that the store
// outlives every rank (DTLAUNCH_STORE_HOSTED=1 on the ranks; docs/ddp.md, "Live recovery").
// Prints one line with the port once it listens, then serves until SIGTERM, SIGINT or SIGHUP.
// Exit status: 0 after such a signal, 2 bad command line, 1 the port cannot be listened on.
#include <dtlaunch/ddp.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"dtlaunch-store: host a job's rendezvous store until SIGTERM"};
  int port = 0;
  app.add_option("--port", port, "port to listen on, on every address (0: a free one)")
      ->check(CLI::Range(0, 65535));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);  // prints --help, or the one-line problem
    return status == 0 ? 0 : 2;      // bad input: 2, as dtlaunch's
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  // Blocked before the store's threads start, so that only sigwait below receives them.
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  try {
    dtlaunch::ddp::StoreHost host(port);
    std::printf("dtlaunch-store: hosting the store on port %d (pid %d)\n", host.port(),
                static_cast<int>(::getpid()));
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    return 0;
  } catch (const dtlaunch::ddp::Error& e) {
    std::fprintf(stderr, "dtlaunch-store: %s\n", e.what());
    return 1;
  }
}
