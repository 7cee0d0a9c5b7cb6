// The shared-memory all_reduce (shm_reduce.hpp).
//
// Segment: a header, one control line per rank, one input slot per rank and two result slots.
// A collective runs in chunks of at most one slot. Per chunk, each rank
//   1. copies its chunk into its own input slot, all but its own share, which no other rank
//      reads, and publishes phase 2k+1 (arrival);
//   2. once every rank has arrived, reduces its 1/world share of the chunk over the other ranks'
//      input slots and its own chunk into result slot k%2 and publishes phase 2k+2;
//   3. once every rank has reduced, copies the whole reduced chunk back.
// Why nothing is overwritten early: a rank writes its input slot again (chunk k+1) only after
// every rank published 2k+2, i.e. finished reading the input slots of chunk k; it writes result
// slot k%2 again (chunk k+2) only after every rank arrived at chunk k+2, i.e. finished copying
// chunk k's result out. Phases are 32-bit counters compared modulo 2^32.
// Across nodes (one segment per node) a collective takes three passes over its chunks: each of
// the node's first K ranks reduces its 1/K share of every chunk into a private buffer (steps 1-2,
// then a phase that frees the input slots); each all-reduces that buffer with the ranks that own
// the same share on the other nodes, in one Gloo all_reduce; then each writes its share of every
// chunk into the result slot, publishes, and all copy the chunk out (step 3).
//
// Waiting: a short spin, then FUTEX_WAIT (shared, not FUTEX_PRIVATE: the word is in another
// process's mapping too) in slices of at most 100 ms, after each of which the peer's process is
// checked and the deadline. A rank that publishes a phase calls FUTEX_WAKE only when a peer
// sleeps on its word (the sleepers count, ordered against the phase by seq_cst on both sides).
#include "shm_reduce.hpp"

#include <linux/futex.h>
#include <sys/mman.h>
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
#include "reduce_kernel.hpp"
#include "shm_segment.hpp"
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
// Across nodes: how many chunks' slices go to the other nodes in one Gloo all_reduce. Fewer
// calls cost less latency; more keep the link busy while the node reduces the next chunks.
constexpr int64_t kChunksPerSend = 4;

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

struct ShmAllReduce::Impl {
  // On this node: `rank` is this rank's index among the node's ranks, `world` their number, and
  // `members` their global ranks. The segment's lines and slots go by node index.
  int rank = 0, world = 1;
  std::vector<int> members;
  int global_rank = 0, global_world = 1, nodes = 1;
  // Chunks are reduced in `slices` shares, by the node's first `slices` ranks: the node's size,
  // or across nodes the smallest node's, so that slice k covers the same elements everywhere.
  int slices = 1;
  std::vector<int> slice_group;  // across nodes (shm_reduce.hpp)
  InterNode inter_node;
  milliseconds timeout{0};
  std::shared_ptr<const std::atomic<bool>> abort;  // the heartbeat's verdict; may be null
  std::vector<Identity> peers;                     // by node index
  Mapping mapping;
  RankLine* lines = nullptr;
  std::vector<char*> slots;
  // What reduce_share reads: the peers' slots, and this rank's own chunk in the tensor (arrive()).
  std::vector<const char*> inputs;
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
    return std::string(nodes > 1 ? "hierarchical" : "shm") + " all_reduce on rank " +
           std::to_string(global_rank) + " of " + std::to_string(global_world);
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
                                             " waiting for rank " + std::to_string(members[q]) +
                                             " (pid " + std::to_string(peers[q].pid) + ")");
      if (now >= next_check) {
        // A frozen or cut-off peer stays alive to /proc: the heartbeat names it.
        if (abort && abort->load(std::memory_order_acquire))
          throw error(ErrorKind::kPeerLost, "aborted while waiting for rank " +
                                                std::to_string(members[q]) +
                                                ": the heartbeat declared a peer lost");
        if (!process_alive(peers[q].pid, peers[q].start_ticks))
          throw error(ErrorKind::kPeerLost, "rank " + std::to_string(members[q]) + " (pid " +
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

  // A chunk's first step (the file's head): copy it in, meet every rank of the node, and on the
  // first chunk check that they all run the same collective. The share `own` that this rank
  // reduces itself (empty if none) stays out of its slot: no other rank reads that part, and
  // this rank reads it from the tensor, which spares a copy of 1/K of the chunk.
  template <class T>
  void arrive(const T* chunk, int64_t n, std::pair<int64_t, int64_t> own, bool first, int64_t numel,
              int32_t kind, Clock::time_point deadline) {
    const auto [lo, hi] = own;
    if (lo > 0) std::memcpy(slots[rank], chunk, static_cast<size_t>(lo) * sizeof(T));
    if (n > hi)
      std::memcpy(slots[rank] + static_cast<size_t>(hi) * sizeof(T), chunk + hi,
                  static_cast<size_t>(n - hi) * sizeof(T));
    inputs[rank] = reinterpret_cast<const char*>(chunk);
    publish(++phase);
    await_all(phase, deadline);
    if (!first) return;
    // The peers wrote these before the phase just awaited; they change only in the next
    // collective, which no rank starts before this rank publishes again.
    for (int q = 0; q < world; ++q) {
      const int64_t their_numel = lines[q].numel.load(std::memory_order_relaxed);
      const int32_t their_kind = lines[q].kind.load(std::memory_order_relaxed);
      if (their_numel != numel || their_kind != kind)
        throw error(ErrorKind::kMismatch, "rank " + std::to_string(members[q]) + " all-reduces " +
                                              describe(their_numel, their_kind) + " where rank " +
                                              std::to_string(global_rank) + " all-reduces " +
                                              describe(numel, kind));
    }
  }

  template <class T>
  void run(T* data, int64_t numel, ReduceOp op, at::ScalarType dtype) {
    const auto deadline = Clock::now() + timeout;
    const int32_t kind = static_cast<int32_t>(dtype) * 8 + static_cast<int32_t>(op);
    lines[rank].numel.store(numel, std::memory_order_relaxed);
    lines[rank].kind.store(kind, std::memory_order_relaxed);
    const int64_t per_chunk = static_cast<int64_t>(kSlotBytes / sizeof(T));
    auto leave = [&](int64_t offset, int64_t n) {  // step 3, after every share of the chunk
      T* result = reinterpret_cast<T*>(results[chunks++ % 2]);
      publish(++phase);
      await_all(phase, deadline);
      if (n > 0) std::memcpy(data + offset, result, static_cast<size_t>(n) * sizeof(T));
    };
    if (nodes == 1) {
      for_each_chunk(numel, per_chunk, [&](int64_t offset, int64_t n) {
        const auto [lo, hi] = share_of<T>(n, slices, rank);
        arrive(data + offset, n, {lo, hi}, offset == 0, numel, kind, deadline);
        reduce_share(reinterpret_cast<T*>(results[chunks % 2]) + lo, inputs, lo, hi, op, world);
        leave(offset, n);
      });
      return;
    }
    // Across nodes, in three passes. 1: this rank's slice of every chunk, reduced over the node;
    // every kChunksPerSend chunks, the part of the slice they filled goes to the other nodes in a
    // Gloo all_reduce of its own (2), which runs on the link while the next chunks are reduced
    // here. 3: each part, once back, into the chunks' result slots, and out. The other nodes cut
    // the same chunks and parts, so every slice's owners send the same lengths in the same order.
    const bool owner = rank < slices;
    const ReduceOp across = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    int64_t owned = 0;
    if (owner)
      for_each_chunk(numel, per_chunk, [&](int64_t, int64_t n) {
        const auto [lo, hi] = share_of<T>(n, slices, rank);
        owned += hi - lo;
      });
    // A tensor, not a plain buffer: a part's all_reduce keeps it alive if this rank gives up.
    const at::Tensor slice = at::empty({owned}, at::TensorOptions().dtype(dtype));
    T* const mine = slice.data_ptr<T>();
    std::vector<std::pair<int64_t, std::function<void()>>> parts;  // each one's end, its wait
    int64_t at = 0, sent = 0, chunk = 0;
    auto send = [&] {
      if (at > sent) parts.emplace_back(at, inter_node(slice.narrow(0, sent, at - sent), across));
      sent = at;
    };
    for_each_chunk(numel, per_chunk, [&](int64_t offset, int64_t n) {
      const auto own = owner ? share_of<T>(n, slices, rank) : std::pair<int64_t, int64_t>{0, 0};
      arrive(data + offset, n, own, offset == 0, numel, kind, deadline);
      if (owner) {
        const auto [lo, hi] = own;
        reduce_share(mine + at, inputs, lo, hi, across, world);
        at += hi - lo;
      }
      publish(++phase);  // the input slots may be written again
      await_all(phase, deadline);
      if (owner && ++chunk % kChunksPerSend == 0) send();
    });
    if (owner) send();
    size_t next = 0;
    int64_t received = 0;
    at = 0;
    for_each_chunk(numel, per_chunk, [&](int64_t offset, int64_t n) {
      if (owner) {
        const auto [lo, hi] = share_of<T>(n, slices, rank);
        for (; received < at + (hi - lo); ++next) {  // a chunk's share lies in one part
          parts[next].second();
          if (op == ReduceOp::kAvg)  // a sum divided by the whole group's size
            for (int64_t i = received; i < parts[next].first; ++i)
              mine[i] /= static_cast<T>(global_world);
          received = parts[next].first;
        }
        std::memcpy(reinterpret_cast<T*>(results[chunks % 2]) + lo, mine + at,
                    static_cast<size_t>(hi - lo) * sizeof(T));
        at += hi - lo;
      }
      leave(offset, n);
    });
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

// Every rank publishes its identity and reads the others': the same records everywhere, so
// that every rank takes the same decision.
std::vector<Identity> exchange_identities(const WorkerEnv& env, bool enabled, bool across_nodes,
                                          c10d::Store& store) {
  Identity me;
  me.enabled = enabled;
  me.across_nodes = across_nodes;
  me.node_rank = env.node_rank;
  me.host = core::host_name("?");
  me.boot_id = boot_id();
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

// The segment's set-up on each node, once the node's ranks are known (Impl::members): the node's
// first rank creates it, the others map it, all say whether they could, and its name goes at
// once. Across nodes, every rank then reads every node's verdict, so that all decide alike.
class SegmentSetup {
 public:
  SegmentSetup(c10d::Store& store, milliseconds timeout, ShmAllReduce::Impl& impl,
               std::vector<int> leaders)
      : rank_(impl.rank),
        world_(impl.world),
        store_(store),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        impl_(impl),
        layout_(impl.world),
        leaders_(std::move(leaders)) {
    for (const Identity& id : impl.peers) visible_.push_back(process_alive(id.pid, id.start_ticks));
  }

  // false when the segment is unavailable somewhere (that node's first rank says why on stderr).
  bool run() {
    if (rank_ == 0)
      create_segment();
    else
      open_segment();
    // The liveness check reads the peers' /proc entries: they must be visible here (not so
    // across PID namespaces), else a live peer would look dead.
    for (int r = 0; r < world_ && problem_.empty(); ++r)
      if (!process_alive(impl_.peers[r].pid, impl_.peers[r].start_ticks))
        problem_ = "rank " + std::to_string(impl_.members[r]) + "'s process (pid " +
                   std::to_string(impl_.peers[r].pid) + ") is not visible in this rank's /proc";
    const bool node_ok = all_mapped();
    if (leaders_.size() < 2) return node_ok;
    if (rank_ == 0)
      store_.set(store_keys::Shm::node(impl_.members[0]), bytes(node_ok ? "ok" : "no"));
    bool all_ok = node_ok;
    for (int leader : leaders_)
      if (leader != impl_.members[0])
        all_ok = get_from_peer(store_, store_keys::Shm::node(leader), leader, 0, 0, false,
                               deadline_, timeout_) == "ok" &&
                 all_ok;
    return all_ok;
  }

  // After a failure: rank 0 removes the segment it created.
  void abandon() const {
    if (rank_ == 0 && !name_.empty()) ::shm_unlink(name_.c_str());
  }

 private:
  // `owner`: a node index.
  std::string from_peer(const std::string& key, int owner) const {
    const Identity& id = impl_.peers[owner];
    return get_from_peer(store_, key, impl_.members[owner], id.pid, id.start_ticks, visible_[owner],
                         deadline_, timeout_);
  }

  void create_segment() {
    remove_stale_segments(kSegmentPrefix);
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
    store_.set(store_keys::Shm::segment(impl_.members[0]),
               bytes(problem_.empty() ? "ok\n" + name_ + "\n" + std::to_string(nonce_)
                                      : "no\n" + problem_));
  }

  void open_segment() {
    std::istringstream rec(from_peer(store_keys::Shm::segment(impl_.members[0]), 0));
    std::string status, nonce_text;
    std::getline(rec, status);
    std::getline(rec, name_);
    std::getline(rec, nonce_text);
    if (status != "ok") {
      // which names the reason itself
      problem_ = "rank " + std::to_string(impl_.members[0]) + " did not create it";
      return;
    }
    nonce_ = std::strtoull(nonce_text.c_str(), nullptr, 10);
    problem_ = map_segment(name_, false, layout_.total, impl_.mapping);
    if (!problem_.empty()) return;
    const auto* header = static_cast<const Header*>(impl_.mapping.base);
    if (header->magic != kMagic || header->nonce != nonce_ ||
        header->world != static_cast<uint64_t>(world_))
      problem_ = name_ + " is not the segment rank " + std::to_string(impl_.members[0]) +
                 " created for this group";
  }

  bool all_mapped() {
    store_.set(store_keys::Shm::mapped(impl_.members[rank_]),
               bytes(problem_.empty() ? "ok" : problem_));
    std::vector<std::string> verdicts;
    for (int r = 0; r < world_; ++r)
      verdicts.push_back(from_peer(store_keys::Shm::mapped(impl_.members[r]), r));
    // Every rank has mapped it (or given up): the name goes now, so that nothing is left in
    // /dev/shm whatever happens to the ranks later. Each rank tries; all but one get ENOENT.
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    for (int r = 0; r < world_; ++r) {
      if (verdicts[r] == "ok") continue;
      if (rank_ == 0)
        say("dtlaunch ddp: shared-memory all_reduce unavailable (rank " +
            std::to_string(impl_.members[r]) + ": " + verdicts[r] +
            "); all_reduce goes through Gloo");
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
  const std::vector<int> leaders_;  // each node's first rank, when the group spans several
  std::vector<bool> visible_;
  std::string name_, problem_;
  uint64_t nonce_ = 0;
};

}  // namespace

std::unique_ptr<ShmAllReduce> ShmAllReduce::create(const WorkerEnv& env, bool enabled,
                                                   bool across_nodes, c10d::Store& store,
                                                   milliseconds timeout,
                                                   std::shared_ptr<const std::atomic<bool>> abort) {
  if (env.world_size < 2) return nullptr;
  const std::vector<Identity> ids = exchange_identities(env, enabled, across_nodes, store);
  std::vector<std::string> keys;
  for (const Identity& id : ids) {
    // Without a boot id, two ranks cannot be known to share a node.
    if (!id.enabled || id.boot_id.empty()) return nullptr;
    keys.push_back(id.node_key());
  }
  const auto nodes = group_by_node(keys);
  size_t smallest = ids.size(), largest = 0;
  for (const auto& node : nodes) {
    smallest = std::min(smallest, node.size());
    largest = std::max(largest, node.size());
  }
  if (nodes.size() > 1) {
    // One rank per node leaves nothing to reduce inside a node: Gloo's ring is the same traffic.
    if (largest < 2) return nullptr;
    for (const Identity& id : ids)
      if (!id.across_nodes) return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  std::vector<int> leaders;
  for (const auto& node : nodes) {
    leaders.push_back(node.front());
    const auto at = std::find(node.begin(), node.end(), env.rank);
    if (at == node.end()) continue;
    impl->members = node;
    impl->rank = static_cast<int>(at - node.begin());
  }
  impl->world = static_cast<int>(impl->members.size());
  for (int r : impl->members) impl->peers.push_back(ids[r]);
  impl->global_rank = env.rank;
  impl->global_world = env.world_size;
  impl->nodes = static_cast<int>(nodes.size());
  impl->slices = nodes.size() > 1 ? static_cast<int>(smallest) : impl->world;
  if (nodes.size() > 1 && impl->rank < impl->slices)
    for (const auto& node : nodes) impl->slice_group.push_back(node[impl->rank]);
  impl->timeout = timeout;
  impl->abort = std::move(abort);
  SegmentSetup setup(store, timeout, *impl, nodes.size() > 1 ? leaders : std::vector<int>{});
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
  const Layout layout(impl->world);
  char* base = static_cast<char*>(impl->mapping.base);
  impl->lines = reinterpret_cast<RankLine*>(base + layout.lines_offset);
  for (int q = 0; q < impl->world; ++q)
    impl->slots.push_back(base + layout.slots_offset + ShmAllReduce::kSlotBytes * q);
  impl->inputs.assign(impl->slots.begin(), impl->slots.end());
  impl->results[0] = base + layout.results_offset;
  impl->results[1] = impl->results[0] + ShmAllReduce::kSlotBytes;
  return std::unique_ptr<ShmAllReduce>(new ShmAllReduce(std::move(impl)));
}

const std::vector<int>& ShmAllReduce::slice_group() const {
  return impl_->slice_group;
}

int ShmAllReduce::slice() const {
  return impl_->rank;
}

int ShmAllReduce::node_count() const {
  return impl_->nodes;
}

void ShmAllReduce::attach_inter_node(InterNode inter_node) {
  impl_->inter_node = std::move(inter_node);
}

}  // namespace dtlaunch::ddp::detail
