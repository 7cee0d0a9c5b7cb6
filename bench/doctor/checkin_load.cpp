// Rank 0's cost per check-in, on its own: `serve()` alone in one process (rank 0), and the
// check-ins from a few load-generator processes, each driving thousands of non-blocking
// connections from one epoll loop (no thread per client), from several loopback source
// addresses (127.0.0.2-17) so that ephemeral ports do not run out. A fresh rank 0 and fresh
// generators for every size; rank 0 reports its wall time from its start to the last verdict
// sent, its CPU time, its peak RSS, and the time to render the table.
//   checkin_load [--generators G] [--window W] [--per-connection K] N...
// K reports per connection: 1 is Slurm's one connection per task; 8 is a node of 8 ranks on one
// connection, as a local-mode launcher sends its workers' (rank 0's own node: ranks 0..K-1).
// Rank 0 holds every connection until the verdict, so it needs RLIMIT_NOFILE above N/K (raised
// here to the hard limit, and the hard limit to N/K + 4096 where permitted: CAP_SYS_RESOURCE).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "doctor/probe.hpp"
#include "doctor/server.hpp"
#include "launch/system.hpp"

using namespace dtlaunch::doctor;

namespace {

constexpr std::uint32_t kTasksPerNode = 8;
constexpr int kSourceAddresses = 16;

// A report like a real task's: rank, node and the fields probe_node fills (sizes as on the test
// cluster: ~0.9 KB on the wire).
TaskReport report_of(std::uint32_t rank, std::uint32_t world, std::uint16_t port) {
  TaskReport r;
  r.contract.rank = rank;
  r.contract.local_rank = rank % kTasksPerNode;
  r.contract.node_rank = rank / kTasksPerNode;
  r.contract.world_size = world;
  r.contract.nnodes = (world + kTasksPerNode - 1) / kTasksPerNode;
  r.network.host = "node" + std::to_string(r.contract.node_rank + 1);
  r.contract.master_addr = "node1";
  r.contract.master_port = port;
  r.contract.dtlaunch_run_id = "slurm-4242.0";
  r.network.master_resolves_to = {"10.0.0.1"};
  r.network.host_resolves_to = {"10.0." + std::to_string(r.contract.node_rank / 250) + "." +
                                std::to_string(r.contract.node_rank % 250 + 1)};
  r.network.local_addr = r.network.host_resolves_to.front();
  r.placement.cpus = std::to_string(r.contract.local_rank * 8) + "-" +
                     std::to_string(r.contract.local_rank * 8 + 7);
  r.placement.omp_num_threads = "8";
  r.resources.shm_bytes = 512ull << 30;
  r.programs.program = {"/shared/venv/bin/python3", 6831736, "bed2d04ddc5f1f29"};
  r.programs.launcher = {"/shared/bin/dtlaunch", 10196072, "5de712503c6d0d6e"};
  r.programs.launcher_version = "dtlaunch 0.1.0";
  r.software.env = {{"NCCL_DEBUG", "WARN"}, {"NCCL_SOCKET_IFNAME", "ib0"}};
  r.clock.sent_unix_ms = unix_ms();
  return r;
}

struct GeneratorStats {
  std::uint64_t ok = 0, failed = 0, retries = 0;
};

// One generator: `count` connections for ranks first, first+1, ..., at most `window` of them
// connecting at once; each sends its report and waits for the verdict.
GeneratorStats generate(std::uint32_t first, std::uint32_t count, std::uint32_t per_connection,
                        std::uint32_t world, std::uint16_t port, std::uint32_t window, int go) {
  std::vector<std::string> frames(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::vector<TaskReport> node;
    for (std::uint32_t k = 0; k < per_connection; ++k)
      node.push_back(report_of((first + i) * per_connection + k, world, port));
    frames[i] = report_frames(node);
  }
  struct Conn {
    int fd = -1;
    std::size_t sent = 0;
    std::string in;
    bool connected = false;
  };
  std::vector<Conn> conns(count);
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  char byte;
  if (::read(go, &byte, 1) != 1) std::exit(1);

  GeneratorStats stats;
  std::uint32_t next = 0, connecting = 0;
  std::vector<std::uint32_t> retry;
  auto start = [&](std::uint32_t i) {
    Conn& c = conns[i];
    c = Conn{};
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(c.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl(0x7f000002u + (first + i) % kSourceAddresses);
    ::bind(c.fd, reinterpret_cast<sockaddr*>(&source), sizeof source);
    sockaddr_in target{};
    target.sin_family = AF_INET;
    target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    target.sin_port = htons(port);
    ::connect(c.fd, reinterpret_cast<sockaddr*>(&target), sizeof target);
    epoll_event e{EPOLLOUT, {.u32 = i}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &e);
    ++connecting;
  };
  std::vector<epoll_event> events(4096);
  while (stats.ok + stats.failed < count) {
    while (connecting < window && (next < count || !retry.empty())) {
      if (!retry.empty()) {
        start(retry.back());
        retry.pop_back();
      } else {
        start(next++);
      }
    }
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 1000);
    for (int k = 0; k < n; ++k) {
      const std::uint32_t i = events[k].data.u32;
      Conn& c = conns[i];
      if (!c.connected) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        --connecting;
        if (err != 0) {  // refused while rank 0 starts, or the backlog was full: again
          ::close(c.fd);
          ++stats.retries;
          retry.push_back(i);
          continue;
        }
        c.connected = true;
      }
      if (c.sent < frames[i].size()) {
        const ssize_t w =
            ::send(c.fd, frames[i].data() + c.sent, frames[i].size() - c.sent, MSG_NOSIGNAL);
        if (w > 0) c.sent += static_cast<std::size_t>(w);
        if (c.sent == frames[i].size()) {
          epoll_event e{EPOLLIN, {.u32 = i}};
          ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &e);
        }
        continue;
      }
      char buffer[256];
      const ssize_t r = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (r > 0) c.in.append(buffer, static_cast<std::size_t>(r));
      std::optional<int> status;
      try {
        status = take_verdict(c.in);
      } catch (const std::exception&) {
        status = 3;
      }
      if (status || r == 0 || (r < 0 && errno != EAGAIN)) {
        (status == 0 ? stats.ok : stats.failed)++;
        ::close(c.fd);
      }
    }
  }
  return stats;
}

struct Rank0Stats {
  double serve_s = 0, cpu_s = 0, render_s = 0;
  long max_rss_kb = 0;
  std::uint64_t reports = 0, problems = 0;
};

Rank0Stats rank0(std::uint32_t world, std::uint32_t per_connection, std::uint16_t port,
                 int go_write, std::uint32_t generators) {
  std::vector<std::string> hosts;
  std::vector<std::uint32_t> tasks;
  for (std::uint32_t node = 0; node * kTasksPerNode < world; ++node) {
    hosts.push_back("node" + std::to_string(node + 1));
    tasks.push_back(std::min(kTasksPerNode, world - node * kTasksPerNode));
  }
  const Expectation expected = slurm_expectation(hosts, tasks, "block");
  std::vector<TaskReport> own;
  for (std::uint32_t k = 0; k < per_connection; ++k) own.push_back(report_of(k, world, port));
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  const auto t0 = Clock::now();
  // The generators start once rank 0 is about to listen: those that come too early retry.
  for (std::uint32_t g = 0; g < generators; ++g)
    if (::write(go_write, "g", 1) != 1) std::exit(1);
  const Diagnosis verdict = serve(expected, std::move(own), port, t0 + std::chrono::seconds(120));
  const auto t1 = Clock::now();
  ::getrusage(RUSAGE_SELF, &after);
  const std::string table = render_table(verdict);
  const auto t2 = Clock::now();
  auto cpu = [](const rusage& u) {
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  Rank0Stats s;
  s.serve_s = std::chrono::duration<double>(t1 - t0).count();
  s.render_s = std::chrono::duration<double>(t2 - t1).count();
  s.cpu_s = cpu(after) - cpu(before);
  s.max_rss_kb = after.ru_maxrss;
  s.reports = verdict.reports.size();
  s.problems = verdict.problems.size() + (table.empty() ? 1 : 0);
  return s;
}

void raise_file_limit(std::uint64_t want) {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_max < want) files.rlim_max = want;  // root only; otherwise stays as it is
  files.rlim_cur = files.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) {
    ::getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
}

// A child's one message to the parent, then its end.
template <class T>
[[noreturn]] void tell(int fd, char tag, const T& value) {
  char message[1 + sizeof(T)];
  message[0] = tag;
  std::memcpy(message + 1, &value, sizeof value);
  _exit(::write(fd, message, sizeof message) == static_cast<ssize_t>(sizeof message) ? 0 : 1);
}

template <class T>
T read_from(int fd) {
  T value{};
  if (::read(fd, &value, sizeof value) != static_cast<ssize_t>(sizeof value)) {
    std::fprintf(stderr, "checkin_load: a child died without its figures\n");
    std::exit(1);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t generators = 4, window = 1024, per_connection = 1;
  std::vector<std::uint32_t> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--generators" && i + 1 < argc)
      generators = static_cast<std::uint32_t>(std::atoi(argv[++i]));
    else if (arg == "--per-connection" && i + 1 < argc)
      per_connection = static_cast<std::uint32_t>(std::atoi(argv[++i]));
    else if (arg == "--window" && i + 1 < argc)
      window = static_cast<std::uint32_t>(std::atoi(argv[++i]));
    else
      sizes.push_back(static_cast<std::uint32_t>(std::atoi(arg.c_str())));
  }
  if (sizes.empty()) sizes = {4096, 16384, 65536};
  std::uint32_t largest = 0;
  for (std::uint32_t n : sizes) largest = std::max(largest, n);
  raise_file_limit(largest / per_connection + 4096);
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  std::printf(
      "%u report(s) per connection, %u generator processes, %u connects in flight, "
      "RLIMIT_NOFILE %llu\n\n",
      per_connection, generators, window, static_cast<unsigned long long>(files.rlim_cur));
  std::printf(
      "| check-ins | rank 0: start to last verdict (s) | rank 0 CPU (s) | per check-in (us, wall) "
      "| rank 0 peak RSS (MiB) | render table (s) | client retries |\n"
      "|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (std::uint32_t n : sizes) {
    const std::uint16_t port = dtlaunch::launch::find_free_port();
    int go[2], results[2];
    if (::pipe(go) != 0 || ::pipe(results) != 0) return 1;
    std::vector<pid_t> children;
    // Connections 1..clients carry the nodes after rank 0's own.
    const std::uint32_t clients = n / per_connection - 1;
    const std::uint32_t share = (clients + generators - 1) / generators;
    for (std::uint32_t g = 0; g < generators; ++g) {
      const std::uint32_t first = 1 + g * share;
      const std::uint32_t count = first > clients ? 0 : std::min(share, clients + 1 - first);
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(go[1]);
        const GeneratorStats s =
            generate(first, count, per_connection, n, port, window / generators + 1, go[0]);
        tell(results[1], 'g', s);
      }
      children.push_back(pid);
    }
    const pid_t server = ::fork();
    if (server == 0) {
      tell(results[1], 'r', rank0(n, per_connection, port, go[1], generators));
    }
    ::close(go[0]);
    ::close(go[1]);
    ::close(results[1]);
    GeneratorStats total;
    Rank0Stats r0{};
    // Each child writes one tagged message (atomic: below PIPE_BUF); they come in any order.
    for (std::uint32_t k = 0; k < generators + 1; ++k) {
      const char tag = read_from<char>(results[0]);
      if (tag == 'g') {
        const auto s = read_from<GeneratorStats>(results[0]);
        total.ok += s.ok;
        total.failed += s.failed;
        total.retries += s.retries;
      } else {
        r0 = read_from<Rank0Stats>(results[0]);
      }
    }
    ::close(results[0]);
    for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
    ::waitpid(server, nullptr, 0);
    if (total.ok != clients || r0.reports != n) {
      std::fprintf(
          stderr, "checkin_load: %u check-ins: %llu verdicts 0, %llu failed, %llu reports\n", n,
          static_cast<unsigned long long>(total.ok), static_cast<unsigned long long>(total.failed),
          static_cast<unsigned long long>(r0.reports));
      return 1;
    }
    std::printf("| %u | %.3f | %.3f | %.1f | %.0f | %.3f | %llu |\n", n, r0.serve_s, r0.cpu_s,
                r0.serve_s * 1e6 / n, static_cast<double>(r0.max_rss_kb) / 1024, r0.render_s,
                static_cast<unsigned long long>(total.retries));
    std::fflush(stdout);
  }
}
