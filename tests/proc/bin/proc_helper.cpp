// A worker with one behaviour per mode, for the supervision tests. Plain POSIX so that what a
// test observes is what the kernel did, not what a runtime added.
//   exit N                      exit with status N
//   raise SIG                   die by signal SIG (a number or a name without "SIG")
//   ignore-term SECONDS [FILE]  ignore SIGTERM, say "ready" (and append a line to FILE), sleep
//   tree PIDFILE group|setsid exit|sleep
//                               fork a child that sleeps 300 s (in our process group, or in a
//                               session of its own), append its pid to PIDFILE, then exit 0 or
//                               sleep 300 s
//   lines COUNT LEN             COUNT lines "R<rank> <i> <LEN letters>", alternately to stdout
//                               and stderr, through stdio's buffers (so lines cross write()
//                               boundaries), then "R<rank> end" without a newline
//   long LEN                    one line of LEN letters on stdout
//   record DIR [child]          append the name of every SIGINT/TERM/HUP/USR1/USR2 received to
//                               DIR/rank<R>.txt (and, with child, a forked child does the same
//                               to DIR/rank<R>.child.txt); "ready" first; exit 0 after SIGTERM
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int rank() {
  const char* r = std::getenv("RANK");
  return r ? std::atoi(r) : 0;
}

int parse_signal(const char* text) {
  if (text[0] >= '0' && text[0] <= '9') return std::atoi(text);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev && std::strcmp(abbrev, text) == 0) return sig;
  }
  std::fprintf(stderr, "proc_helper: unknown signal %s\n", text);
  std::exit(99);
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) std::exit(98);
  const std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) < 0) std::exit(98);
  ::close(fd);
}

int die_by(int sig) {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // no core files in the build tree
  ::signal(sig, SIG_DFL);
  std::fprintf(stderr, "R%d raising %s\n", rank(), sigabbrev_np(sig));
  std::fflush(stderr);
  ::raise(sig);
  return 97;  // a signal whose default is to be ignored
}

void append_line(const std::string& path, const std::string& line);

int ignore_term(int seconds, const char* ready_file) {
  ::signal(SIGTERM, SIG_IGN);
  std::printf("ready\n");
  std::fflush(stdout);
  if (ready_file) append_line(ready_file, "ready");
  ::sleep(static_cast<unsigned>(seconds));
  return 0;
}

int tree(const std::string& pidfile, bool own_session, bool then_exit) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (own_session) ::setsid();
    ::sleep(300);
    ::_exit(0);
  }
  append_line(pidfile, std::to_string(child));
  if (!then_exit) ::sleep(300);
  return 0;
}

int lines(long count, long len) {
  const std::string payload(static_cast<std::size_t>(len), static_cast<char>('a' + rank() % 26));
  for (long i = 0; i < count; ++i)
    std::fprintf(i % 2 ? stderr : stdout, "R%d %ld %s\n", rank(), i, payload.c_str());
  std::fprintf(stdout, "R%d end", rank());
  return 0;
}

int long_line(long len) {
  const std::string payload(static_cast<std::size_t>(len), 'x');
  std::printf("%s\n", payload.c_str());
  return 0;
}

// Async-signal-safe recording: the handler only writes to a descriptor opened beforehand.
int g_record_fd = -1;
volatile sig_atomic_t g_got_term = 0;

void record_signal(int sig) {
  const char* name = sigabbrev_np(sig);
  char line[16];
  std::size_t n = 0;
  for (const char* p = name; *p && n < sizeof line - 1; ++p) line[n++] = *p;
  line[n++] = '\n';
  [[maybe_unused]] ssize_t w = ::write(g_record_fd, line, n);
  if (sig == SIGTERM) g_got_term = 1;
}

int record(const std::string& dir, bool with_child) {
  std::string path = dir + "/rank" + std::to_string(rank());
  pid_t child = -1;
  if (with_child) {
    child = ::fork();
    if (child == 0) path += ".child";
  }
  path += ".txt";
  g_record_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_record_fd < 0) return 98;
  struct sigaction act {};
  act.sa_handler = record_signal;
  sigemptyset(&act.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) ::sigaction(sig, &act, nullptr);
  if (::write(g_record_fd, "ready\n", 6) < 0) return 98;
  while (!g_got_term) ::pause();
  if (child > 0) {
    int status;
    while (::waitpid(child, &status, 0) < 0) {
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "exit" && argc == 3) return std::atoi(argv[2]);
  if (mode == "raise" && argc == 3) return die_by(parse_signal(argv[2]));
  if (mode == "ignore-term" && (argc == 3 || argc == 4))
    return ignore_term(std::atoi(argv[2]), argc == 4 ? argv[3] : nullptr);
  if (mode == "tree" && argc == 5)
    return tree(argv[2], std::strcmp(argv[3], "setsid") == 0, std::strcmp(argv[4], "exit") == 0);
  if (mode == "lines" && argc == 4) return lines(std::atol(argv[2]), std::atol(argv[3]));
  if (mode == "long" && argc == 3) return long_line(std::atol(argv[2]));
  if (mode == "record" && (argc == 3 || argc == 4)) return record(argv[2], argc == 4);
  std::fprintf(stderr, "proc_helper: bad arguments (see the comment at the top of the source)\n");
  return 99;
}
