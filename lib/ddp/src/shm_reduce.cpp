// The shared-memory all_reduce (shm_reduce.hpp).
//
// Segment: a header, one control line per rank, one input slot per rank and two result slots.
// A collective runs in chunks of at most one slot. Per chunk, each rank
//   1. copies its chunk into its own input slot and publishes phase 2k+1 (arrival);
//   2. once every rank has arrived, reduces its 1/world share of the chunk over all input slots
//      into result slot k%2 and publishes phase 2k+2;
//   3. once every rank has reduced, copies the whole reduced chunk back.
// Why nothing is overwritten early: a rank writes its input slot again (chunk k+1) only after
// every rank published 2k+2, i.e. finished reading the input slots of chunk k; it writes result
// slot k%2 again (chunk k+2) only after every rank arrived at chunk k+2, i.e. finished copying
// chunk k's result out. Phases are 32-bit counters compared modulo 2^32.
//
// Waiting: a short spin, then FUTEX_WAIT (shared, not FUTEX_PRIVATE: the word is in another
// process's mapping too) in slices of at most 100 ms, after each of which the peer's process is
// checked and the deadline. A rank that publishes a phase calls FUTEX_WAKE only when a peer
// sleeps on its word (the sleepers count, ordered against the phase by seq_cst on both sides).
#include "shm_reduce.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "core/host.hpp"
#include "core/text.hpp"
#include "internal.hpp"
#include "monitor.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

constexpr uint64_t kMagic = 0x316d68732d6c7464;  // "dtl-shm1"
constexpr size_t kLineBytes = 128;               // two cache lines: no false sharing with prefetch
constexpr size_t kPageBytes = 4096;
// How long a waiter spins before it sleeps. On a node with as many busy threads as cores, a
// spinning waiter takes the core from the rank it waits for; a short spin still catches a peer
// that is a few microseconds behind.
constexpr auto kSpin = std::chrono::microseconds(20);
// How often a sleeping waiter checks that the rank it waits for still exists, and the
// heartbeat's verdict.
constexpr auto kLivenessEvery = milliseconds(100);

std::string errno_text(int err) {
  return std::strerror(err);
}

struct alignas(kLineBytes) Header {
  uint64_t magic;
  uint64_t nonce;  // published through the store: a segment of another run cannot pass for ours
  uint64_t world;
  uint64_t slot_bytes;
};

// One rank's control line. Only its rank writes it; the others read it.
struct alignas(kLineBytes) RankLine {
  std::atomic<uint32_t> phase;     // the futex word
  std::atomic<uint32_t> sleepers;  // peers in FUTEX_WAIT on `phase`
  std::atomic<int64_t> numel;      // of the collective in progress, for the mismatch check
  std::atomic<int32_t> kind;       // dtype * 8 + reduce op, likewise
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "the futex word must be a plain 32-bit word");
static_assert(std::atomic<int64_t>::is_always_lock_free, "lock-free across processes");

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

struct Layout {
  size_t lines_offset, slots_offset, results_offset, total;
  explicit Layout(int world) {
    lines_offset = sizeof(Header);
    slots_offset =
        round_up(lines_offset + sizeof(RankLine) * static_cast<size_t>(world), kPageBytes);
    results_offset = slots_offset + ShmAllReduce::kSlotBytes * static_cast<size_t>(world);
    total = results_offset + 2 * ShmAllReduce::kSlotBytes;
  }
};

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses).
std::vector<std::string> stat_fields(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return {};
  const std::string line(buf, static_cast<size_t>(n));
  const auto paren = line.rfind(')');
  if (paren == std::string::npos) return {};
  std::istringstream rest(line.substr(paren + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// Field 22 (starttime) is the 20th after the command name; field 3 (state) the 1st.
constexpr size_t kStateField = 0, kStartField = 19;

uint64_t start_ticks_of(const std::string& path) {
  const auto f = stat_fields(path);
  return f.size() > kStartField ? std::strtoull(f[kStartField].c_str(), nullptr, 10) : 0;
}

std::string read_line_of(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return s.substr(0, s.find('\n'));
}

// What a rank publishes at group creation: "enabled\nhost\nboot_id\npid\nstart_ticks".
struct Identity {
  bool enabled = false;
  std::string host, boot_id;
  int pid = 0;
  uint64_t start_ticks = 0;

  std::string record() const {
    return std::string(enabled ? "1" : "0") + "\n" + host + "\n" + boot_id + "\n" +
           std::to_string(pid) + "\n" + std::to_string(start_ticks);
  }
  static Identity parse(const std::string& rec) {
    std::istringstream in(rec);
    Identity id;
    std::string enabled, pid, ticks;
    std::getline(in, enabled);
    std::getline(in, id.host);
    std::getline(in, id.boot_id);
    std::getline(in, pid);
    std::getline(in, ticks);
    id.enabled = enabled == "1";
    id.pid = std::atoi(pid.c_str());
    id.start_ticks = std::strtoull(ticks.c_str(), nullptr, 10);
    return id;
  }
  bool same_node(const Identity& o) const {
    return !boot_id.empty() && host == o.host && boot_id == o.boot_id;
  }
};

// A mapped segment; unmaps (and closes) on destruction.
struct Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

// Creates (rank 0) or opens the segment and maps it; "" on success, else why not.
std::string map_segment(const std::string& name, bool create, size_t size, Mapping& out) {
  const int fd = create ? ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)
                        : ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return "shm_open " + name + ": " + errno_text(errno);
  std::string why;
  if (create) {
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      why = "ftruncate " + name + " to " + std::to_string(size) + " bytes: " + errno_text(errno);
    } else if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
      // tmpfs allocates on first touch: without this a full /dev/shm is a SIGBUS mid-job.
      why = "reserving " + std::to_string(size >> 20) + " MiB in /dev/shm for " + name + ": " +
            errno_text(err);
    }
  } else {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != size)
      why =
          name + " has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(size);
  }
  if (why.empty()) {
    out.base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (out.base == MAP_FAILED)
      why = "mmap " + name + ": " + errno_text(errno);
    else
      out.size = size;
  }
  ::close(fd);
  if (!why.empty() && create) ::shm_unlink(name.c_str());
  return why;
}

template <class T>
void reduce_share(T* __restrict out, const std::vector<char*>& slots, int64_t lo, int64_t hi,
                  ReduceOp op, int world) {
  // Blocks that stay in L1 while every rank's slot is folded into them.
  constexpr int64_t kBlock = 2048;
  const T divisor = static_cast<T>(world);
  for (int64_t b = lo; b < hi; b += kBlock) {
    const int64_t e = std::min(hi, b + kBlock);
    std::memcpy(out + b, reinterpret_cast<const T*>(slots[0]) + b,
                static_cast<size_t>(e - b) * sizeof(T));
    for (size_t q = 1; q < slots.size(); ++q) {
      const T* __restrict src = reinterpret_cast<const T*>(slots[q]);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          for (int64_t i = b; i < e; ++i) out[i] += src[i];
          break;
        case ReduceOp::kMin:
          for (int64_t i = b; i < e; ++i) out[i] = src[i] < out[i] ? src[i] : out[i];
          break;
        case ReduceOp::kMax:
          for (int64_t i = b; i < e; ++i) out[i] = src[i] > out[i] ? src[i] : out[i];
          break;
      }
    }
    // As the Gloo path does: the sum, then a true division by the world size.
    if (op == ReduceOp::kAvg)
      for (int64_t i = b; i < e; ++i) out[i] /= divisor;
  }
}

struct WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::optional<Error> error;
};

struct Task {
  at::Tensor buffer;  // contiguous; the caller's own tensor when it already was
  ReduceOp op;
  std::shared_ptr<WorkState> state;
};

class ShmWork final : public Work {
 public:
  ShmWork(std::shared_ptr<WorkState> state, at::Tensor buffer, at::Tensor target)
      : state_(std::move(state)), buffer_(std::move(buffer)), target_(std::move(target)) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->cv.wait(lock, [&] { return state_->done; });
    if (state_->error) throw *state_->error;
    if (!buffer_.is_same(target_)) target_.copy_(buffer_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->done;
  }

 private:
  std::shared_ptr<WorkState> state_;
  at::Tensor buffer_, target_;
};

}  // namespace

uint64_t own_start_ticks() {
  return start_ticks_of("/proc/self/stat");
}

bool process_alive(int pid, uint64_t start_ticks) {
  const auto f = stat_fields("/proc/" + std::to_string(pid) + "/stat");
  if (f.size() <= kStartField) return false;
  if (f[kStateField] == "Z" || f[kStateField] == "X" || f[kStateField] == "x") return false;
  return std::strtoull(f[kStartField].c_str(), nullptr, 10) == start_ticks;
}

struct ShmAllReduce::Impl {
  int rank = 0, world = 1;
  milliseconds timeout{0};
  std::shared_ptr<const std::atomic<bool>> abort;  // the heartbeat's verdict; may be null
  std::vector<Identity> peers;                     // by rank
  Mapping mapping;
  RankLine* lines = nullptr;
  std::vector<char*> slots;
  char* results[2] = {nullptr, nullptr};

  // Touched by the communication thread only.
  uint32_t phase = 0;
  uint64_t chunks = 0;          // chunks reduced so far: picks the result slot
  std::optional<Error> broken;  // after a failure the segment's state is unknown: fail fast

  std::mutex mutex;
  std::condition_variable cv;  // tasks queued, or the queue drained
  std::deque<Task> queue;
  bool running = false;  // the thread works on a task taken off the queue
  bool stopping = false;
  std::thread thread;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  std::string what() const {
    return "shm all_reduce on rank " + std::to_string(rank) + " of " + std::to_string(world);
  }
  Error error(ErrorKind kind, const std::string& why) const {
    return Error(kind, "dtlaunch ddp: " + what() + " failed: " + why);
  }

  void publish(uint32_t value) {
    RankLine& mine = lines[rank];
    mine.phase.store(value, std::memory_order_seq_cst);
    if (mine.sleepers.load(std::memory_order_seq_cst) > 0)
      futex(&mine.phase, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // Until rank q has published `target`, the deadline passes, or q's process is gone.
  void await(int q, uint32_t target, Clock::time_point deadline) {
    RankLine& line = lines[q];
    auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - target) >= 0; };
    if (reached(line.phase.load(std::memory_order_acquire))) return;
    const auto spin_until = Clock::now() + kSpin;
    do {
      for (int i = 0; i < 64; ++i) {
        cpu_relax();
        if (reached(line.phase.load(std::memory_order_acquire))) return;
      }
    } while (Clock::now() < spin_until);
    auto next_check = Clock::now() + kLivenessEvery;
    for (;;) {
      const auto now = Clock::now();
      if (now >= deadline)
        throw error(ErrorKind::kTimeout, "timed out after " + core::duration_text(timeout) +
                                             " waiting for rank " + std::to_string(q) + " (pid " +
                                             std::to_string(peers[q].pid) + ")");
      if (now >= next_check) {
        // A frozen or cut-off peer stays alive to /proc: the heartbeat names it.
        if (abort && abort->load(std::memory_order_acquire))
          throw error(ErrorKind::kPeerLost, "aborted while waiting for rank " + std::to_string(q) +
                                                ": the heartbeat declared a peer lost");
        if (!process_alive(peers[q].pid, peers[q].start_ticks))
          throw error(ErrorKind::kPeerLost, "rank " + std::to_string(q) + " (pid " +
                                                std::to_string(peers[q].pid) + ") is gone");
        next_check = now + kLivenessEvery;
      }
      const auto slice = std::min(next_check, deadline) - now;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      line.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = line.phase.load(std::memory_order_seq_cst);
      if (!reached(seen)) futex(&line.phase, FUTEX_WAIT, seen, &ts);
      line.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (reached(line.phase.load(std::memory_order_acquire))) return;
    }
  }

  void await_all(uint32_t target, Clock::time_point deadline) {
    for (int q = 0; q < world; ++q)
      if (q != rank) await(q, target, deadline);
  }

  static std::string describe(int64_t numel, int32_t kind) {
    return std::to_string(numel) + " " + dtype_name(static_cast<int8_t>(kind / 8)) + " elements (" +
           to_string(static_cast<ReduceOp>(kind % 8)) + ")";
  }

  template <class T>
  void run(T* data, int64_t numel, ReduceOp op, at::ScalarType dtype) {
    const auto deadline = Clock::now() + timeout;
    const int32_t kind = static_cast<int32_t>(dtype) * 8 + static_cast<int32_t>(op);
    RankLine& mine = lines[rank];
    mine.numel.store(numel, std::memory_order_relaxed);
    mine.kind.store(kind, std::memory_order_relaxed);
    const int64_t per_chunk = static_cast<int64_t>(kSlotBytes / sizeof(T));
    // Shares start on 64-byte boundaries, so that two ranks never write one cache line.
    constexpr int64_t kAlign = 64 / sizeof(T);
    int64_t offset = 0;
    // At least one chunk, so that ranks disagreeing on an empty tensor still meet.
    do {
      const int64_t n = std::min(per_chunk, numel - offset);
      if (n > 0) std::memcpy(slots[rank], data + offset, static_cast<size_t>(n) * sizeof(T));
      publish(++phase);
      await_all(phase, deadline);
      if (offset == 0) {
        // The peers wrote these before the phase just awaited; they change only in the next
        // collective, which no rank starts before this rank publishes again.
        for (int q = 0; q < world; ++q) {
          const int64_t their_numel = lines[q].numel.load(std::memory_order_relaxed);
          const int32_t their_kind = lines[q].kind.load(std::memory_order_relaxed);
          if (their_numel != numel || their_kind != kind)
            throw error(ErrorKind::kMismatch, "rank " + std::to_string(q) + " all-reduces " +
                                                  describe(their_numel, their_kind) +
                                                  " where rank " + std::to_string(rank) +
                                                  " all-reduces " + describe(numel, kind));
        }
      }
      T* result = reinterpret_cast<T*>(results[chunks % 2]);
      const int64_t share = (n + world - 1) / world;
      const int64_t block = (share + kAlign - 1) / kAlign * kAlign;
      const int64_t lo = std::min(n, block * rank), hi = std::min(n, lo + block);
      reduce_share(result, slots, lo, hi, op, world);
      publish(++phase);
      await_all(phase, deadline);
      if (n > 0) std::memcpy(data + offset, result, static_cast<size_t>(n) * sizeof(T));
      ++chunks;
      offset += n;
    } while (offset < numel);
  }

  void execute(Task& task) {
    if (broken) throw *broken;
    try {
      if (task.buffer.scalar_type() == at::kFloat)
        run(task.buffer.data_ptr<float>(), task.buffer.numel(), task.op, at::kFloat);
      else
        run(task.buffer.data_ptr<double>(), task.buffer.numel(), task.op, at::kDouble);
    } catch (const Error& e) {
      const std::string cause = e.what();
      const auto at = cause.find(" failed: ");
      broken = error(e.kind(), "an earlier one failed (" +
                                   (at == std::string::npos ? cause : cause.substr(at + 9)) + ")");
      throw;
    }
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and nothing left to do
      Task task = std::move(queue.front());
      queue.pop_front();
      running = true;
      lock.unlock();
      std::optional<Error> failure;
      try {
        execute(task);
      } catch (const Error& e) {
        failure = e;
      } catch (const std::exception& e) {
        failure = error(ErrorKind::kBackend, first_line(e));
      }
      {
        std::lock_guard<std::mutex> done(task.state->mutex);
        task.state->done = true;
        task.state->error = std::move(failure);
      }
      task.state->cv.notify_all();
      task = Task{};  // the tensor's last reference may be this one: free it off the lock
      lock.lock();
      running = false;
      cv.notify_all();
    }
  }
};

ShmAllReduce::ShmAllReduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

ShmAllReduce::~ShmAllReduce() = default;

bool ShmAllReduce::supports(const at::Tensor& tensor) {
  return tensor.device().is_cpu() &&
         (tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble);
}

std::shared_ptr<Work> ShmAllReduce::start(at::Tensor& tensor, ReduceOp op) {
  at::Tensor buffer = tensor.contiguous();
  auto state = std::make_shared<WorkState>();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->queue.push_back(Task{buffer, op, state});
  }
  impl_->cv.notify_all();
  return std::make_shared<ShmWork>(std::move(state), std::move(buffer), tensor);
}

void ShmAllReduce::drain() {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->cv.wait(lock, [&] { return impl_->queue.empty() && !impl_->running; });
}

namespace {

// Segments are named /dtlaunch-ddp-PID-TICKS-NONCE after the rank 0 that created them (its pid
// and start time). A rank 0 killed between creating one and unlinking it, once every rank has
// mapped it, leaves it in /dev/shm; the next rank 0 on the node removes those of its user whose
// creator is gone.
const std::string kSegmentPrefix = "dtlaunch-ddp-";

void remove_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(kSegmentPrefix, 0) != 0) continue;
    int pid = 0, used = 0;
    unsigned long long ticks = 0, nonce = 0;
    if (std::sscanf(name.c_str() + kSegmentPrefix.size(), "%d-%llu-%16llx%n", &pid, &ticks, &nonce,
                    &used) != 3 ||
        static_cast<size_t>(used) != name.size() - kSegmentPrefix.size() || pid <= 0)
      continue;
    // Only this user's: another user's segment is not this job's to judge (and the sticky
    // /dev/shm would refuse anyway).
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != ::geteuid())
      continue;
    if (!process_alive(pid, ticks)) ::shm_unlink(("/" + name).c_str());
  }
  ::closedir(dir);
}

// The value of `key`, which rank `owner` sets; polled rather than a blocking get, so that a peer
// killed during the set-up is named at once instead of a "Socket Timeout" at the deadline. Only
// peers whose process this rank can see are checked (not so across PID namespaces).
std::string get_from_peer(c10d::Store& store, const std::string& key, int owner, int pid,
                          uint64_t start_ticks, bool visible, Clock::time_point deadline,
                          std::chrono::milliseconds timeout) {
  auto pause = milliseconds(1);
  while (!store.check({key})) {
    if (visible && !process_alive(pid, start_ticks))
      throw Error(ErrorKind::kPeerLost, "rank " + std::to_string(owner) + " (pid " +
                                            std::to_string(pid) +
                                            ") is gone: it died during the set-up");
    if (Clock::now() >= deadline)
      throw Error(ErrorKind::kTimeout, "timed out after " + core::duration_text(timeout) +
                                           " waiting for rank " + std::to_string(owner) + " (pid " +
                                           std::to_string(pid) + ")");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(50));
  }
  return text(store.get(key));
}

}  // namespace

namespace {

// Every rank publishes its identity and reads the others': the same records everywhere, so
// that every rank takes the same decision.
std::vector<Identity> exchange_identities(const WorkerEnv& env, bool enabled, c10d::Store& store) {
  Identity me;
  me.enabled = enabled;
  me.host = core::host_name("?");
  me.boot_id = read_line_of("/proc/sys/kernel/random/boot_id");
  me.pid = static_cast<int>(::getpid());
  me.start_ticks = own_start_ticks();
  std::vector<Identity> ids(static_cast<size_t>(env.world_size));
  try {
    store.set(store_keys::Shm::id(env.rank), bytes(me.record()));
    for (int r = 0; r < env.world_size; ++r)
      ids[r] = Identity::parse(text(store.get(store_keys::Shm::id(r))));
  } catch (const std::exception& e) {
    const std::string line = first_line(e);
    throw Error(
        classify_backend_failure(line),
        "dtlaunch ddp: rank " + std::to_string(env.rank) +
            " could not exchange node identities for the shared-memory all_reduce: " + line);
  }
  return ids;
}

// The segment's set-up once every rank is known to be on this node: rank 0 creates it, the
// others map it, all say whether they could, and its name goes at once.
class SegmentSetup {
 public:
  SegmentSetup(const WorkerEnv& env, c10d::Store& store, milliseconds timeout,
               ShmAllReduce::Impl& impl)
      : rank_(env.rank),
        world_(env.world_size),
        store_(store),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        impl_(impl),
        layout_(env.world_size) {
    for (const Identity& id : impl.peers) visible_.push_back(process_alive(id.pid, id.start_ticks));
  }

  // false when the segment is unavailable somewhere (rank 0 says why on stderr).
  bool run() {
    if (rank_ == 0)
      create_segment();
    else
      open_segment();
    // The liveness check reads the peers' /proc entries: they must be visible here (not so
    // across PID namespaces), else a live peer would look dead.
    for (int r = 0; r < world_ && problem_.empty(); ++r)
      if (!process_alive(impl_.peers[r].pid, impl_.peers[r].start_ticks))
        problem_ = "rank " + std::to_string(r) + "'s process (pid " +
                   std::to_string(impl_.peers[r].pid) + ") is not visible in this rank's /proc";
    return all_mapped();
  }

  // After a failure: rank 0 removes the segment it created.
  void abandon() const {
    if (rank_ == 0 && !name_.empty()) ::shm_unlink(name_.c_str());
  }

 private:
  std::string from_peer(const std::string& key, int owner) const {
    const Identity& id = impl_.peers[owner];
    return get_from_peer(store_, key, owner, id.pid, id.start_ticks, visible_[owner], deadline_,
                         timeout_);
  }

  void create_segment() {
    remove_stale_segments();
    std::random_device random;
    nonce_ = (static_cast<uint64_t>(random()) << 32) ^ random();
    const Identity& me = impl_.peers[0];
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "%d-%llu-%016llx", me.pid,
                  static_cast<unsigned long long>(me.start_ticks),
                  static_cast<unsigned long long>(nonce_));
    name_ = "/" + kSegmentPrefix + suffix;
    problem_ = map_segment(name_, true, layout_.total, impl_.mapping);
    if (problem_.empty()) {
      auto* header = static_cast<Header*>(impl_.mapping.base);
      header->world = static_cast<uint64_t>(world_);
      header->slot_bytes = ShmAllReduce::kSlotBytes;
      header->nonce = nonce_;
      header->magic = kMagic;
    }
    store_.set(store_keys::Shm::segment(),
               bytes(problem_.empty() ? "ok\n" + name_ + "\n" + std::to_string(nonce_)
                                      : "no\n" + problem_));
  }

  void open_segment() {
    std::istringstream rec(from_peer(store_keys::Shm::segment(), 0));
    std::string status, nonce_text;
    std::getline(rec, status);
    std::getline(rec, name_);
    std::getline(rec, nonce_text);
    if (status != "ok") {
      problem_ = "rank 0 did not create it";  // rank 0 names the reason itself
      return;
    }
    nonce_ = std::strtoull(nonce_text.c_str(), nullptr, 10);
    problem_ = map_segment(name_, false, layout_.total, impl_.mapping);
    if (!problem_.empty()) return;
    const auto* header = static_cast<const Header*>(impl_.mapping.base);
    if (header->magic != kMagic || header->nonce != nonce_ ||
        header->world != static_cast<uint64_t>(world_))
      problem_ = name_ + " is not the segment rank 0 created for this group";
  }

  bool all_mapped() {
    store_.set(store_keys::Shm::mapped(rank_), bytes(problem_.empty() ? "ok" : problem_));
    std::vector<std::string> verdicts;
    for (int r = 0; r < world_; ++r) verdicts.push_back(from_peer(store_keys::Shm::mapped(r), r));
    // Every rank has mapped it (or given up): the name goes now, so that nothing is left in
    // /dev/shm whatever happens to the ranks later. Each rank tries; all but one get ENOENT.
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    for (int r = 0; r < world_; ++r) {
      if (verdicts[r] == "ok") continue;
      if (rank_ == 0)
        say("dtlaunch ddp: shared-memory all_reduce unavailable (rank " + std::to_string(r) +
            ": " + verdicts[r] + "); all_reduce goes through Gloo");
      return false;
    }
    return true;
  }

  const int rank_, world_;
  c10d::Store& store_;
  const milliseconds timeout_;
  const Clock::time_point deadline_;
  ShmAllReduce::Impl& impl_;
  const Layout layout_;
  std::vector<bool> visible_;
  std::string name_, problem_;
  uint64_t nonce_ = 0;
};

}  // namespace

std::unique_ptr<ShmAllReduce> ShmAllReduce::create(const WorkerEnv& env, bool enabled,
                                                   c10d::Store& store, milliseconds timeout,
                                                   std::shared_ptr<const std::atomic<bool>> abort) {
  if (env.world_size < 2) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->peers = exchange_identities(env, enabled, store);
  for (const Identity& id : impl->peers)
    if (!id.enabled || !id.same_node(impl->peers[0])) return nullptr;
  impl->rank = env.rank;
  impl->world = env.world_size;
  impl->timeout = timeout;
  impl->abort = std::move(abort);
  SegmentSetup setup(env, store, timeout, *impl);
  const std::string failed = "dtlaunch ddp: rank " + std::to_string(env.rank) +
                             " could not set up the shared-memory all_reduce with its peers: ";
  try {
    if (!setup.run()) return nullptr;
  } catch (const Error& e) {
    setup.abandon();
    throw Error(e.kind(), failed + e.what());
  } catch (const std::exception& e) {
    setup.abandon();
    const std::string line = first_line(e);
    throw Error(classify_backend_failure(line), failed + line);
  }
  const Layout layout(env.world_size);
  char* base = static_cast<char*>(impl->mapping.base);
  impl->lines = reinterpret_cast<RankLine*>(base + layout.lines_offset);
  for (int q = 0; q < env.world_size; ++q)
    impl->slots.push_back(base + layout.slots_offset + ShmAllReduce::kSlotBytes * q);
  impl->results[0] = base + layout.results_offset;
  impl->results[1] = impl->results[0] + ShmAllReduce::kSlotBytes;
  return std::unique_ptr<ShmAllReduce>(new ShmAllReduce(std::move(impl)));
}

}  // namespace dtlaunch::ddp::detail
