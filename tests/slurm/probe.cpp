// dtlaunch-probe: the program the Slurm end-to-end tests run under `srun dtlaunch`.
//
// It writes what it saw (environment, host name, IPv4 addresses, pid, CPUs) to
// OUT/TAG.rank<RANK>.env,
// optionally proves the rendezvous address by a real TCP exchange through MASTER_ADDR:MASTER_PORT,
// optionally fails on purpose, and optionally waits for signals, recording each one in
// OUT/TAG.rank<RANK>.signal. The test drivers read those files; the probe itself judges only the
// rendezvous, whose result only a rank can see.
//
//   dtlaunch-probe --out DIR [--tag TAG] [--rendezvous [--linger SECS]]
//                  [--fail-rank R --fail-code C] [--hold SECS] [--exit-on-signal CODE]
//                  [--checkpoint FILE]
//
// TAG may contain {restart}, replaced by SLURM_RESTART_COUNT (0 when unset), so the runs of a
// requeued job keep separate records. --linger keeps rank 0's listening socket open that long
// after the rendezvous, so concurrent steps provably hold their ports at the same time.
// --checkpoint models a resumable trainer: when FILE exists the run counts as resumed and ends at
// once with 0; on a signal the rank writes FILE before exiting with CODE.
//
// Exit: 0 ok; C for the failing rank; on a signal CODE, or 128+signo when no CODE is given;
// 2 bad usage; 4 rendezvous failed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

struct Args {
  std::string out;
  std::string tag = "probe";
  bool rendezvous = false;
  std::optional<long> fail_rank;
  long fail_code = 1;
  long hold_seconds = 0;
  long linger_seconds = 0;
  std::optional<long> exit_on_signal;
  std::string checkpoint;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "dtlaunch-probe: %s\n", what.c_str());
  std::exit(2);
}

long to_long(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0)
    usage_error(flag + " wants an integer, got '" + text + "'");
  return v;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--out")
      a.out = value();
    else if (flag == "--tag")
      a.tag = value();
    else if (flag == "--rendezvous")
      a.rendezvous = true;
    else if (flag == "--fail-rank")
      a.fail_rank = to_long(flag, value());
    else if (flag == "--fail-code")
      a.fail_code = to_long(flag, value());
    else if (flag == "--hold")
      a.hold_seconds = to_long(flag, value());
    else if (flag == "--linger")
      a.linger_seconds = to_long(flag, value());
    else if (flag == "--exit-on-signal")
      a.exit_on_signal = to_long(flag, value());
    else if (flag == "--checkpoint")
      a.checkpoint = value();
    else
      usage_error("unknown argument '" + flag + "'");
  }
  if (a.out.empty()) usage_error("--out DIR is required");
  if (auto pos = a.tag.find("{restart}"); pos != std::string::npos) {
    const char* restarts = std::getenv("SLURM_RESTART_COUNT");
    a.tag.replace(pos, 9, restarts ? restarts : "0");
  }
  return a;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

std::string now_text() {
  auto t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", t.count());
  return buf;
}

std::string ipv4_addresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "error";
  std::string out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    sockaddr_in sin;
    std::memcpy(&sin, i->ifa_addr, sizeof sin);
    inet_ntop(AF_INET, &sin.sin_addr, buf, sizeof buf);
    if (std::string(buf).rfind("127.", 0) == 0) continue;
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  freeifaddrs(list);
  return out;
}

// A field of /proc/self/status (the CPUs the task runs on, for --cpu-bind), "" if absent.
std::string status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + ":", 0) == 0) {
      const auto start = line.find_first_not_of(" \t", name.size() + 1);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
  return {};
}

// Written to a temporary name and renamed, so a reader never sees half a record.
void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) usage_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) usage_error("cannot rename to " + path);
}

std::string record_path(const Args& a, const std::string& rank, const char* suffix) {
  return a.out + "/" + a.tag + ".rank" + rank + suffix;
}

// ---- rendezvous: rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects -------

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::optional<sockaddr_in> resolve(const std::string& host, const std::string& port,
                                   std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    why = "cannot resolve " + host + ": " + gai_strerror(rc);
    return std::nullopt;
  }
  sockaddr_in sin;
  std::memcpy(&sin, res->ai_addr, sizeof sin);
  freeaddrinfo(res);
  return sin;
}

bool read_line(int fd, std::string& line, int timeout_ms) {
  line.clear();
  char c;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    if (read(fd, &c, 1) != 1) return false;
    if (c == '\n') return true;
    line += c;
  }
}

bool write_all(int fd, const std::string& text) {
  return write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

constexpr int kRendezvousMs = 30000;

// Rank 0 binds the address MASTER_ADDR resolves to: that bind fails unless rank 0 really runs on
// the master node. It collects every other rank once and answers each with the sum of all ranks.
std::string rendezvous_master(const sockaddr_in& addr, long world, long linger_seconds) {
  Fd s(socket(AF_INET, SOCK_STREAM, 0));
  int one = 1;
  setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return std::string("bind to MASTER_ADDR:MASTER_PORT failed: ") + std::strerror(errno);
  if (listen(s.fd, 64) != 0) return std::string("listen failed: ") + std::strerror(errno);
  const std::string listen_from = now_text();
  std::vector<int> peers;
  std::set<long> seen{0};
  long sum = 0;
  std::string error;
  while (static_cast<long>(seen.size()) < world && error.empty()) {
    pollfd p{s.fd, POLLIN, 0};
    if (poll(&p, 1, kRendezvousMs) <= 0) {
      error =
          "only " + std::to_string(seen.size()) + " of " + std::to_string(world) + " ranks arrived";
      break;
    }
    int c = accept(s.fd, nullptr, nullptr);
    if (c < 0) continue;
    peers.push_back(c);
    std::string line;
    if (!read_line(c, line, kRendezvousMs)) {
      error = "a peer sent no rank";
      break;
    }
    long r = std::strtol(line.c_str(), nullptr, 10);
    if (r <= 0 || r >= world || !seen.insert(r).second)
      error = "bad or duplicate rank '" + line + "'";
    sum += r;
  }
  for (int c : peers) {
    write_all(c, error.empty() ? "sum " + std::to_string(sum) + "\n" : "error\n");
    close(c);
  }
  if (!error.empty()) return error;
  std::this_thread::sleep_for(std::chrono::seconds(linger_seconds));
  return "ok sum=" + std::to_string(sum) + " listen=" + listen_from + "," + now_text();
}

std::string rendezvous_peer(const sockaddr_in& addr, long rank) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRendezvousMs);
  while (true) {
    Fd s(socket(AF_INET, SOCK_STREAM, 0));
    if (connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      std::string line;
      if (!write_all(s.fd, std::to_string(rank) + "\n") || !read_line(s.fd, line, kRendezvousMs))
        return "master closed the connection";
      if (line.rfind("sum ", 0) != 0) return "master reported '" + line + "'";
      return "ok sum=" + line.substr(4);
    }
    if (std::chrono::steady_clock::now() > deadline)
      return std::string("cannot connect to MASTER_ADDR:MASTER_PORT: ") + std::strerror(errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string rendezvous(long linger_seconds) {
  std::string why;
  auto addr = resolve(env_or("MASTER_ADDR", ""), env_or("MASTER_PORT", ""), why);
  if (!addr) return why;
  long rank = std::strtol(env_or("RANK", "-1").c_str(), nullptr, 10);
  long world = std::strtol(env_or("WORLD_SIZE", "0").c_str(), nullptr, 10);
  if (rank < 0 || world <= 0 || rank >= world) return "RANK/WORLD_SIZE missing or inconsistent";
  if (world == 1) return "ok sum=0";
  return rank == 0 ? rendezvous_master(*addr, world, linger_seconds) : rendezvous_peer(*addr, rank);
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);

  // Blocked from the start, so a signal sent early stays pending until the hold picks it up.
  sigset_t wanted;
  sigemptyset(&wanted);
  for (int s : {SIGTERM, SIGUSR1, SIGUSR2, SIGINT}) sigaddset(&wanted, s);
  if (args.hold_seconds > 0) sigprocmask(SIG_BLOCK, &wanted, nullptr);

  const std::string rank = env_or("RANK", "none." + std::to_string(getpid()));
  char host[256] = {};
  gethostname(host, sizeof host - 1);

  std::ostringstream rec;
  rec << "probe.hostname=" << host << "\n"
      << "probe.addrs=" << ipv4_addresses() << "\n"
      << "probe.pid=" << getpid() << "\n"
      << "probe.ppid=" << getppid() << "\n"
      << "probe.start=" << now_text() << "\n"
      << "probe.cpus=" << status_field("Cpus_allowed_list") << "\n";
  int status = 0;
  if (args.rendezvous) {
    std::string result = rendezvous(args.linger_seconds);
    rec << "probe.rendezvous=" << result << "\n";
    if (result.rfind("ok", 0) != 0) {
      std::fprintf(stderr, "dtlaunch-probe: rank %s: rendezvous: %s\n", rank.c_str(),
                   result.c_str());
      status = 4;
    }
  }
  const bool resumed = !args.checkpoint.empty() && access(args.checkpoint.c_str(), F_OK) == 0;
  if (!args.checkpoint.empty()) rec << "probe.resumed=" << (resumed ? 1 : 0) << "\n";
  for (char** e = environ; *e; ++e) {
    std::string var = *e;  // one line per variable: exported shell functions hold newlines
    for (auto pos = var.find('\n'); pos != std::string::npos; pos = var.find('\n', pos))
      var.replace(pos, 1, "\\n");
    rec << "env." << var << "\n";
  }
  write_file(record_path(args, rank, ".env"), rec.str());
  if (status != 0) return status;

  if (args.fail_rank && std::to_string(*args.fail_rank) == rank) {
    // Fail only once every rank has started and recorded itself, so what the others see is the
    // failure and not a race with their own start.
    long world = std::strtol(env_or("WORLD_SIZE", "1").c_str(), nullptr, 10);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (long r = 0; r < world && std::chrono::steady_clock::now() < deadline;) {
      if (access(record_path(args, std::to_string(r), ".env").c_str(), F_OK) == 0)
        ++r;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return static_cast<int>(args.fail_code);
  }
  if (resumed) return 0;

  if (args.hold_seconds > 0) {
    timespec limit{static_cast<time_t>(args.hold_seconds), 0};
    siginfo_t info{};
    int sig = sigtimedwait(&wanted, &info, &limit);
    if (sig > 0) {
      if (!args.checkpoint.empty())
        write_file(args.checkpoint, "rank " + rank + " " + now_text() + "\n");
      // Who sent it: slurmstepd itself when nothing stands between Slurm and the program.
      std::string sender;
      std::ifstream comm("/proc/" + std::to_string(info.si_pid) + "/comm");
      std::getline(comm, sender);
      write_file(record_path(args, rank, ".signal"),
                 std::string("signal=SIG") + sigabbrev_np(sig) +
                     "\nsender_pid=" + std::to_string(info.si_pid) + "\nsender_comm=" + sender +
                     "\ntime=" + now_text() + "\n");
      return args.exit_on_signal ? static_cast<int>(*args.exit_on_signal) : 128 + sig;
    }
  }
  return 0;
}
