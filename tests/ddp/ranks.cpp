#include "ranks.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ddp_test {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind/getsockname failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<int> all_ranks(int world) {
  std::vector<int> r;
  for (int i = 0; i < world; ++i) r.push_back(i);
  return r;
}

namespace {

// The parent's environment without any launch variables it may carry (a test run under
// dtlaunch or torchrun must not leak its own RANK into the children).
std::vector<std::string> base_environment() {
  static const char* kDrop[] = {
      "RANK=",           "WORLD_SIZE=",  "LOCAL_RANK=",           "LOCAL_WORLD_SIZE=",
      "MASTER_ADDR=",    "MASTER_PORT=", "DTLAUNCH_CUDA_DEVICE=", "GLOO_SOCKET_IFNAME=",
      "OMP_NUM_THREADS="};
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    bool drop = false;
    for (const char* d : kDrop) drop = drop || std::strncmp(*e, d, std::strlen(d)) == 0;
    if (!drop) out.emplace_back(*e);
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

RankRun run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                  const std::vector<int>& launch, const std::map<std::string, std::string>& env,
                  std::chrono::seconds limit) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  char dir_template[] = "/tmp/ddp_test_XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::string dir = dir_template;

  struct Child {
    pid_t pid;
    int rank;
    std::string log;
  };
  std::vector<Child> children;
  for (int rank : launch) {
    // Later entries win: the launch variables, then the caller's overrides.
    std::map<std::string, std::string> vars;
    for (const auto& entry : base_environment()) {
      auto eq = entry.find('=');
      vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
    }
    vars["RANK"] = std::to_string(rank);
    vars["WORLD_SIZE"] = std::to_string(world);
    vars["LOCAL_RANK"] = std::to_string(rank);
    vars["LOCAL_WORLD_SIZE"] = std::to_string(world);
    vars["MASTER_ADDR"] = "127.0.0.1";
    vars["MASTER_PORT"] = std::to_string(port);
    vars["OMP_NUM_THREADS"] = "1";
    for (const auto& [k, v] : env) vars[k] = v;
    std::vector<std::string> envs;
    for (const auto& [k, v] : vars) envs.push_back(k + "=" + v);
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv_p, env_p;
    for (auto& s : argv_s) argv_p.push_back(s.data());
    argv_p.push_back(nullptr);
    for (auto& s : envs) env_p.push_back(s.data());
    env_p.push_back(nullptr);
    const std::string log = dir + "/rank" + std::to_string(rank) + ".log";

    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      ::execve(program.c_str(), argv_p.data(), env_p.data());
      std::perror("execve");
      ::_exit(127);
    }
    children.push_back(Child{pid, rank, log});
  }

  RankRun run;
  std::vector<bool> done(children.size(), false);
  size_t remaining = children.size();
  run.ranks.resize(children.size());
  while (remaining > 0) {
    const bool over = std::chrono::steady_clock::now() - start > limit;
    for (size_t i = 0; i < children.size(); ++i) {
      if (done[i]) continue;
      if (over) ::kill(children[i].pid, SIGKILL);
      int st = 0;
      pid_t got = ::waitpid(children[i].pid, &st, over ? 0 : WNOHANG);
      if (got != children[i].pid) continue;
      done[i] = true;
      --remaining;
      run.ranks[i].rank = children[i].rank;
      run.ranks[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      run.ranks[i].output = slurp(children[i].log);
      ::unlink(children[i].log.c_str());
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::rmdir(dir.c_str());
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace ddp_test
