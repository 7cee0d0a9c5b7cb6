// The flight recorder's ring and files (lib/ddp/src/monitor.*), driven directly: memory as
// entries arrive, the files' names, an error's file never replaced, and a directory that cannot
// take the file (a file in the way, a symlink, a full filesystem): one warning, nothing left.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

// Before Catch: glog's CHECK (through LibTorch) must not shadow Catch's.
#include "../../lib/ddp/src/monitor.hpp"
#include "dtlaunch_catch.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace dtlaunch::ddp;
using namespace dtlaunch::ddp::detail;

namespace {

long rss_kb() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

using dtlaunch_test::read_file;
using dtlaunch_test::TempDir;

// stderr into a string while alive.
struct CaptureStderr {
  std::string file = fs::temp_directory_path() / ("stderr-" + std::to_string(::getpid()));
  int saved = ::dup(2);
  CaptureStderr() {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  std::string text() { return read_file(file); }
  ~CaptureStderr() {
    ::dup2(saved, 2);
    ::close(saved);
    ::unlink(file.c_str());
  }
};

std::unique_ptr<Monitor> monitor(const std::string& dir, int rank, size_t entries = 16) {
  WorkerEnv env;
  env.rank = rank;
  env.world_size = 8;
  MonitorSettings s;
  s.trace_dir = dir;
  s.trace_entries = entries;
  s.run_id = "slurm-77.0";
  s.attempt = 2;
  s.dump_signal = false;
  return std::make_unique<Monitor>(env, c10::intrusive_ptr<c10d::Store>(), std::chrono::seconds(1),
                                   s);
}

size_t leftovers(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp.") != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("flight recorder: the ring costs nothing at init and grows as entries arrive",
          "[ddp][recorder]") {
  const long before = rss_kb();
  FlightRecorder big(kMaxTraceEntries);
  // Before: vector(entries) value-initialized every slot at init (10,000,000 entries: 460 MB).
  CHECK(rss_kb() - before < 4096);
  CHECK(big.allocated_bytes() == 0);
  for (int i = 0; i < 1000; ++i) big.end(big.begin(Op::kBarrier, nullptr, -1), true);
  CHECK(big.allocated_bytes() < 1024 * sizeof(CollectiveRecord) * 2 + 4096);
  CHECK(big.entries().size() == 1000);

  FlightRecorder small(3);
  for (int i = 0; i < 5; ++i) small.end(small.begin(Op::kBarrier, nullptr, -1), true);
  const auto held = small.entries();
  REQUIRE(held.size() == 3);
  CHECK(held.front().seq == 3);
  CHECK(held.back().seq == 5);
  CHECK(held.back().state == CollectiveRecord::State::kCompleted);
  CHECK(small.find(4).end_us >= small.find(4).enqueue_us);
  CHECK(small.find(1).enqueue_us == 0);  // gone from the ring
}

TEST_CASE("flight recorder files: run and attempt in the name, an error's file is never replaced",
          "[ddp][recorder]") {
  TempDir dir;
  auto m = monitor(dir.path() + "/traces", 3);
  const std::string base = dir.path() + "/traces/slurm-77.0.a2.rank-3";
  CHECK(m->write_file("on demand") == base + ".json");
  CHECK(m->write_file("again") == base + ".json");  // a snapshot replaces the last snapshot
  CHECK(read_file(base + ".json").find("\"reason\": \"again\"") != std::string::npos);
  m->record(Error(ErrorKind::kTimeout, "the first error"));
  m->record(Error(ErrorKind::kTimeout, "the second error"));
  CHECK(read_file(base + ".error.json").find("\"reason\": \"the first error\"") !=
        std::string::npos);
  CHECK(read_file(base + ".error-2.json").find("\"reason\": \"the second error\"") !=
        std::string::npos);
  // Another run's files in the same directory stay: its run id differs.
  CHECK(fs::exists(base + ".json"));
  CHECK(leftovers(dir.path() + "/traces") == 0);
  const std::string text = read_file(base + ".error.json");
  CHECK(text.rfind("{\"format\": \"dtlaunch-flight-record\", \"version\": 2, \"run_id\": "
                   "\"slurm-77.0\", \"attempt\": 2, \"rank\": 3, \"world_size\": 8, ",
                   0) == 0);
  CHECK(text.find("\"clock_offset_us\": 0, \"clock_error_us\": 0") != std::string::npos);
}

TEST_CASE("flight recorder files: what is in the way is refused with one warning, nothing left",
          "[ddp][recorder]") {
  TempDir dir;
  const std::string base = dir.path() + "/slurm-77.0.a2.rank-";
  fs::create_directory(base + "1.json");             // a directory at the path
  fs::create_symlink("/dev/null", base + "2.json");  // a symlink at the path
  std::ofstream(dir.path() + "/file") << "x";        // a file as the directory
  CaptureStderr err;
  auto in_way = monitor(dir.path(), 1);
  CHECK(in_way->write_file("a").empty());
  CHECK(in_way->write_file("b").empty());
  auto link = monitor(dir.path(), 2);
  CHECK(link->write_file("a").empty());
  CHECK(fs::is_symlink(base + "2.json"));
  auto not_dir = monitor(dir.path() + "/file", 4);
  CHECK(not_dir->write_file("a").empty());
  const std::string text = err.text();
  INFO(text);
  CHECK(text.find("dtlaunch ddp: rank 1: the flight recorder was not written to '" + base +
                  "1.json': it exists and is not a regular file (no further warning)\n") !=
        std::string::npos);
  CHECK(text.find("rank 1:", text.find("rank 1:") + 1) == std::string::npos);  // once
  CHECK(text.find("rank 2: the flight recorder was not written") != std::string::npos);
  CHECK(text.find("rank 4: the flight recorder was not written to '" + dir.path() +
                  "/file/slurm-77.0.a2.rank-4.json': cannot create the directory") !=
        std::string::npos);
  CHECK(leftovers(dir.path()) == 0);
}

TEST_CASE("flight recorder files: a full filesystem leaves no temporary file", "[ddp][recorder]") {
  TempDir dir;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A 16 KiB tmpfs of our own, in a mount namespace of our own.
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=16k") != 0)
      ::_exit(77);
    const int err = ::open((dir.path() + "/stderr").c_str(), O_WRONLY | O_CREAT, 0600);
    auto m = monitor(dir.path(), 0, 1000);
    for (int i = 0; i < 1000; ++i)
      m->recorder().end(m->recorder().begin(Op::kBarrier, nullptr, -1), true);
    const int saved = ::dup(2);
    ::dup2(err, 2);
    const bool written = !m->write_file("full").empty();
    ::dup2(saved, 2);
    const size_t left = leftovers(dir.path());
    ::unlink((dir.path() + "/stderr").c_str());
    ::_exit(written ? 1 : left != 0 ? 2 : 0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    WARN("no mount namespace here (not root): the full-filesystem case was not run");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);  // 1: it claimed to write; 2: a temporary file was left
}
