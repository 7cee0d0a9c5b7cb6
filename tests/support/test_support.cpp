#include "test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "contract/contract.hpp"
#include "launch/system.hpp"
#include "proc/supervisor.hpp"

extern char** environ;

namespace dtlaunch_test {
namespace fs = std::filesystem;

TempDir::TempDir(std::string_view tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base && *base ? base : "/tmp") + "/" + std::string(tag) + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// Variables of the runtime's own that a test runner started under dtlaunch or torchrun must not
// pass on; the contract's variables are written (or removed) by to_env.
constexpr std::string_view kRuntimeKnobs[] = {"GLOO_SOCKET_IFNAME", "USE_LIBUV", "OMP_NUM_THREADS"};

}  // namespace

Ranks::Ranks(const std::string& program, const std::vector<std::string>& args, int world,
             const fs::path& log_dir, const std::string& tag, RankOptions options) {
  launched_ = options.launch;
  if (launched_.empty())
    for (int r = 0; r < world; ++r) launched_.push_back(r);
  const std::uint16_t port = dtlaunch::launch::find_free_port("127.0.0.1");
  for (int r : launched_) {
    dtlaunch::core::EnvMap inherited = dtlaunch::core::EnvMap::from_environ(environ);
    for (const std::string_view knob : kRuntimeKnobs) inherited.erase(knob);
    dtlaunch::contract::WorkerContract contract;
    contract.rank = static_cast<std::uint32_t>(r);
    contract.world_size = static_cast<std::uint32_t>(world);
    contract.local_rank = static_cast<std::uint32_t>(r);
    contract.local_world_size = static_cast<std::uint32_t>(world);
    contract.master_addr = "127.0.0.1";
    contract.master_port = port;
    dtlaunch::core::EnvMap vars =
        dtlaunch::contract::apply_env(inherited, dtlaunch::contract::to_env(contract, inherited));
    for (const auto& [name, value] : options.env) vars.set(name, value);

    std::vector<std::string> env = vars.to_strings();
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);

    fs::path log = log_dir / (tag + "-rank" + std::to_string(r) + ".log");
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + log.string());
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve(program.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fd);
    pids_.push_back(pid);
    status_.push_back(-1);
    logs_.push_back(log);
  }
}

Ranks::~Ranks() {
  for (pid_t& pid : pids_) {
    if (pid <= 0) continue;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

size_t Ranks::index_of(int rank) const {
  auto it = std::find(launched_.begin(), launched_.end(), rank);
  if (it == launched_.end())
    throw std::out_of_range("rank " + std::to_string(rank) + " was not launched");
  return static_cast<size_t>(it - launched_.begin());
}

std::string Ranks::log(int rank) const {
  return read_file(logs_.at(index_of(rank)));
}

size_t Ranks::reap() {
  size_t running = 0;
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] <= 0) continue;
    int ws = 0;
    if (::waitpid(pids_[i], &ws, WNOHANG) == pids_[i]) {
      status_[i] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
      pids_[i] = -1;
    } else {
      ++running;
    }
  }
  return running;
}

bool Ranks::wait_for_output(int rank, const std::string& text, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (log(rank).find(text) != std::string::npos) return true;
    if (reap() == 0) return log(rank).find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::vector<int> Ranks::wait_all(std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (reap() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return status_;  // -1 for ranks still running; the destructor kills them
}

}  // namespace dtlaunch_test
