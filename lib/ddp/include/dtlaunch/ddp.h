// dtlaunch's thin DDP runtime: what torch.distributed, DistributedSampler and
// DistributedDataParallel give a Python training program, for a LibTorch one.
// This is the only header users include (docs/ddp.md). It builds against LibTorch 1.13 and 2.x.
//
// Every error the runtime throws is a dtlaunch::ddp::Error (a std::runtime_error) with a kind and
// a one-line message that names the variable, rank, collective or address at fault.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/data/samplers/base.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// The runtime's shared library is built with hidden visibility: it exports what this header
// marks with DTLAUNCH_DDP_API, and nothing else (tests/ddp/exports_test.sh checks with nm -D).
#define DTLAUNCH_DDP_API __attribute__((visibility("default")))

namespace dtlaunch::ddp {

// What went wrong, so that a program can act on it (checkpoint and exit 75 on kPeerLost, say).
enum class ErrorKind {
  kConfig,    // the environment, an option, or a misuse of the API
  kTimeout,   // a deadline passed (the rendezvous, a collective, NCCL's init)
  kPeerLost,  // a peer's connection closed, or the peer died
  kMismatch,  // ranks called different collectives, or with a different dtype, shape or root
  kBackend,   // any other failure of Gloo, NCCL, CUDA or the store
  kStopped,   // request_stop() ended a wait: a rendezvous, or a live recovery's
};

DTLAUNCH_DDP_API const char* to_string(ErrorKind kind) noexcept;

// For a program's stop-signal handler (SIGTERM, SIGUSR1: preemption); async-signal-safe. From
// then on a wait of the runtime that may last long ends with Error(ErrorKind::kStopped): a
// rendezvous, and a live recovery's wait for replacements (LiveRun::step), so that a job
// preempted while it recovers leaves within moments rather than after DTLAUNCH_DDP_LIVE_WAIT.
// Collectives and steps are not interrupted: a program agrees on its stop between steps.
DTLAUNCH_DDP_API void request_stop() noexcept;

// The exit status that says "a peer was lost; I am healthy" (the heartbeat's kPeerLost), the
// same as dtlaunch's own: a job driver restarts without this task's node, and tells it apart
// from the culprit's status (1, or 128+N). dtlaunch-train exits with it on kPeerLost.
constexpr int kExitPeerLost = 76;

class DTLAUNCH_DDP_API Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

enum class Backend { kAuto, kGloo, kNccl };
enum class ReduceOp { kSum, kAvg, kMin, kMax };

DTLAUNCH_DDP_API const char* to_string(Backend backend) noexcept;
DTLAUNCH_DDP_API const char* to_string(ReduceOp op) noexcept;

// Whether this build has the NCCL backend compiled in and a usable CUDA device is present.
// kAuto picks kNccl exactly when this is true.
DTLAUNCH_DDP_API bool nccl_available() noexcept;

struct InitOptions {
  // kAuto: NCCL when nccl_available(), else Gloo.
  Backend backend = Backend::kAuto;
  // Bounds the rendezvous (all ranks reaching the store) and every collective.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Bounds the rendezvous alone when positive (a short one finds a missing rank quickly without
  // shortening the collectives' timeout); 0: `timeout`.
  std::chrono::milliseconds rendezvous_timeout{0};
  // While the rendezvous waits, a line on stderr this often says what it waits for (which ranks
  // are missing, or that rank 0's store is not up yet); 0: silent.
  std::chrono::milliseconds progress_every{std::chrono::seconds(15)};
  // Gloo worker threads per process. 0 (automatic): 2 when the node has at least 4 cores per
  // local rank, else 1, because Gloo's threads otherwise take cores from the ranks' own compute
  // (2 ranks on 2 cores: steps 5-8 % slower with 2 threads than with 1; docs/ddp.md).
  int gloo_threads = 0;
  // Gloo backend: when every rank runs on this node, float32/float64 all_reduces go through a
  // shared-memory segment instead of Gloo's TCP loopback (docs/ddp.md, "Shared-memory
  // all_reduce"). false, or DTLAUNCH_DDP_SHM=0 on any rank: Gloo for every rank.
  bool shm_all_reduce = true;
};

// The launch contract (dtlaunch exports it; torchrun exports all but DTLAUNCH_CUDA_DEVICE).
struct DTLAUNCH_DDP_API WorkerEnv {
  int rank = 0;                    // RANK
  int world_size = 1;              // WORLD_SIZE
  int local_rank = 0;              // LOCAL_RANK (default 0)
  int local_world_size = 1;        // LOCAL_WORLD_SIZE (default 1)
  int node_rank = 0;               // NODE_RANK (default 0): with the host, tells nodes apart
  int device_index = 0;            // DTLAUNCH_CUDA_DEVICE, else LOCAL_RANK
  std::string master_addr;         // MASTER_ADDR
  int master_port = 0;             // MASTER_PORT
  std::string gloo_socket_ifname;  // GLOO_SOCKET_IFNAME (optional, as in PyTorch)
  // USE_LIBUV, as in PyTorch 2.4+: "1" (default) hosts the store on TCPStore's libuv server
  // where this LibTorch has one, "0" on the older server. LibTorch 1.13 has only the older one.
  bool store_use_libuv = true;
  // DTLAUNCH_STORE_HOSTED=1: another process hosts the store (dtlaunch-store), so that it outlives
  // any rank; rank 0 connects to it like the others. 0 (default): rank 0 hosts it.
  bool store_hosted = false;
  // DTLAUNCH_RUN_ID, the launcher's opaque identity of the job ("" when unset, as under
  // torchrun). Every rank's (run_id, world_size) must equal rank 0's at the rendezvous, so that
  // two jobs that share MASTER_ADDR:MASTER_PORT fail instead of mixing their ranks.
  std::string run_id;
  // DTLAUNCH_JOB_KEY, 64 hex digits ("" when unset): the job's secret, with which the heartbeat
  // seals its frames so that a process outside the job cannot end it (docs/security.md).
  std::string job_key;

  // Reads the process environment once.
  static WorkerEnv from_environment();
  // The pure core: the same rules applied to a given set of variables. Throws a one-line error
  // naming every missing or malformed variable.
  static WorkerEnv from_variables(const std::map<std::string, std::string>& vars);
};

// A collective in flight. wait() returns once the result is in the tensor (NCCL: the calling
// thread waits for the GPU work, polling, up to the group's timeout) and rethrows the
// collective's error, if any.
class ProcessGroup;
class DTLAUNCH_DDP_API Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool completed() = 0;
};

namespace detail {
class Monitor;
class PeerWatch;
class LiveGroup;
void attach_peer_watch(ProcessGroup& group, std::shared_ptr<PeerWatch> watch);
}  // namespace detail

// Every collective is numbered (per group, from 1) and recorded in the group's flight recorder;
// a collective that times out or loses a peer throws after asking the other ranks where they
// are (docs/ddp.md, "When a job hangs").
class DTLAUNCH_DDP_API ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const noexcept { return env_.rank; }
  int size() const noexcept { return env_.world_size; }
  Backend backend() const noexcept { return backend_; }
  // Where this group's tensors live: CPU for Gloo, cuda:<device_index> for NCCL. NCCL also
  // accepts CPU tensors (staged through device memory).
  at::Device device() const noexcept { return device_; }
  const WorkerEnv& env() const noexcept { return env_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  // Collectives started on this group so far (the last one's sequence number).
  uint64_t collectives_started() const noexcept;
  // Writes this rank's flight recorder file now (DTLAUNCH_DDP_TRACE_DIR/RUN.aATTEMPT.rank-R.json,
  // replacing this rank's previous snapshot, never an error's file); returns its path, or ""
  // when no directory is set or the file could not be written (warned once on stderr).
  std::string write_flight_record(const std::string& reason) const;

  // In place. float32 and float64 on every backend; float16/bfloat16 too (Gloo reduces bfloat16
  // in float32). kAvg is defined for floating types only.
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) {
    all_reduce_async(tensor, op)->wait();
  }
  // The tensor must stay alive and untouched until wait() returns.
  std::shared_ptr<Work> all_reduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // In place: every rank ends with root's values.
  void broadcast(at::Tensor& tensor, int root);
  // One tensor per rank, in rank order; every rank passes a tensor of the same shape and dtype.
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor);
  void barrier();

 protected:
  ProcessGroup(WorkerEnv env, Backend backend, at::Device device, std::chrono::milliseconds timeout,
               std::shared_ptr<detail::Monitor> monitor);

  // The backend's collectives, called with arguments already checked (a defined tensor, a root
  // in range, a floating type for kAvg).
  virtual std::shared_ptr<Work> start_all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> start_broadcast(at::Tensor& tensor, int root) = 0;
  virtual std::vector<at::Tensor> run_all_gather(const at::Tensor& tensor) = 0;
  virtual std::shared_ptr<Work> start_barrier() = 0;

 private:
  friend class detail::Monitor;
  friend class detail::LiveGroup;
  friend void detail::attach_peer_watch(ProcessGroup&, std::shared_ptr<detail::PeerWatch>);
  // A LiveRun's group hands every call to its current generation's group (LiveRun below).
  ProcessGroup* forward_ = nullptr;
  WorkerEnv env_;
  Backend backend_;
  at::Device device_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<detail::Monitor> monitor_;
  // The heartbeat (DTLAUNCH_DDP_HEARTBEAT_TIMEOUT); null when off. Declared last: it stops
  // first, while the monitor it reads positions from is still there.
  std::shared_ptr<detail::PeerWatch> peer_watch_;
};

// Rendezvous through a TCP store at MASTER_ADDR:MASTER_PORT (hosted by rank 0) and connect the
// backend. When ranks are missing at the deadline, throws kTimeout saying how many arrived,
// which ranks are missing and the address tried.
DTLAUNCH_DDP_API std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
DTLAUNCH_DDP_API std::shared_ptr<ProcessGroup> init_process_group(const WorkerEnv& env,
                                                                  const InitOptions& options = {});

// torch.utils.data.distributed.DistributedSampler: the same indices as PyTorch for the same
// (dataset size, replicas, rank, seed, epoch, shuffle, drop_last). Each next() hands out up to
// batch_size of this rank's indices; plug it into torch::data::make_data_loader.
//
// make_data_loader takes the sampler by value and gives no access to it afterwards, so copies
// of a DistributedSampler share their epoch: keep a copy and call set_epoch(e) on it before
// each epoch; the loader's copy picks the epoch up when the loader begins the next pass.
class DTLAUNCH_DDP_API DistributedSampler
    : public torch::data::samplers::Sampler<std::vector<size_t>> {
  using Base = torch::data::samplers::Sampler<std::vector<size_t>>;
  template <class S, class A>
  static A argument_of(void (S::*)(A));

 public:
  // The optionals of Sampler::reset and Sampler::next as this LibTorch spells them
  // (c10::optional up to 2.3, std::optional since), taken from the base class itself.
  using OptionalSize = decltype(argument_of(&Base::reset));
  using OptionalBatch = decltype(std::declval<Base&>().next(size_t{}));

  DistributedSampler(size_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // As in PyTorch: call before each epoch so that the shuffle differs between epochs.
  // Also rewinds this copy to the start of the epoch.
  void set_epoch(uint64_t epoch);
  uint64_t epoch() const noexcept { return *epoch_; }

  // The pure core: this rank's indices for the current epoch.
  std::vector<size_t> indices() const;
  // Indices per rank (len(sampler) in PyTorch) and over all ranks.
  size_t num_samples() const noexcept { return num_samples_; }
  size_t total_size() const noexcept { return num_samples_ * static_cast<size_t>(replicas_); }

  void reset(OptionalSize new_size = OptionalSize{}) override;
  OptionalBatch next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void recompute_sizes();

  size_t dataset_size_;
  int replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  std::shared_ptr<uint64_t> epoch_ = std::make_shared<uint64_t>(0);  // shared by copies
  size_t num_samples_ = 0;
  std::vector<size_t> epoch_indices_;  // filled by reset()
  size_t cursor_ = 0;
};

struct DdpOptions {
  // Buckets close once they reach this size (so one may exceed it by its last gradient).
  size_t bucket_cap_bytes = 25u << 20;
  // The first bucket of each dtype (the last layers' gradients, the first to be ready) closes
  // once it reaches this size, or bucket_cap_bytes if smaller, so that its all_reduce starts
  // earlier in backward. PyTorch's DDP uses 1 MiB (_DEFAULT_FIRST_BUCKET_BYTES). Default: no
  // smaller first bucket, because with it the DDP step was slower on the 2-core test cluster
  // (docs/benchmarks.md), where the early all_reduce takes CPU from backward.
  size_t first_bucket_cap_bytes = SIZE_MAX;
  // true: after the first synchronised backward, each parameter's .grad is its place in its
  // bucket (contiguous parameters only), so backward accumulates into the bucket and the averages
  // need no copy back: two passes over the gradients and their memory saved. .grad stays a plain
  // tensor (not an autograd view: zero_grad works), but one whose memory the next backward
  // reuses; a .grad the program replaces is copied in and replaced again. PyTorch has the same
  // option, off by default; on here, because it made the 25 M-parameter step faster on the test
  // cluster (docs/benchmarks.md). false: separate gradients, copied in and out.
  bool gradient_as_bucket_view = true;
  // false: a parameter that got no gradient in a synchronised backward is an error naming it.
  // true: its slot is reduced as zeros; a parameter unused on every rank keeps its gradient.
  bool find_unused_parameters = false;
  // Broadcast rank 0's buffers (e.g. BatchNorm running stats) after each synchronised backward
  // (and at construction), so that every rank's next forward uses rank 0's buffers.
  bool broadcast_buffers = true;
  // Keep the memory that a step frees (activations, gradients) in the process for the next step
  // instead of handing it back to the system and faulting it in again. With glibc: malloc's mmap
  // threshold at its 32 MiB maximum and the heap trimmed only above 1 GiB free, set once for the
  // whole process at construction, unless MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is
  // set. On a 2-core AMD EPYC VM page faults were half of the step without it
  // (docs/benchmarks.md). The price: the process keeps its peak step memory. false: malloc as
  // it was.
  bool keep_step_memory = true;
};

// Communication timing accumulated over synchronised iterations, for benchmarks.
struct DdpStats {
  uint64_t iterations = 0;       // synchronised backward passes
  uint64_t buckets_reduced = 0;  // bucket all-reduces completed
  // Bucket all-reduces started while gradients of the same backward were still to come: the
  // ones that can overlap with backward (all but the last bucket, when every gradient is used).
  uint64_t buckets_overlapped = 0;
  // Wall time during which at least one bucket all-reduce was in flight.
  double allreduce_seconds = 0;
  // The part of allreduce_seconds that elapsed before backward finished (overlapped).
  double hidden_seconds = 0;
  // Time spent waiting for all-reduces after backward finished (= allreduce - hidden).
  double exposed_seconds() const noexcept { return allreduce_seconds - hidden_seconds; }
  // PyTorch DDP's own runtime statistics, defined as its Reducer defines them, so that a
  // benchmark compares like with like (avg_backward_comm_time and
  // avg_backward_compute_comm_overlap_time of DistributedDataParallel._get_ddp_logging_data()):
  // comm: from the first bucket's launch to the gradients written back after the last wait;
  // overlap: from the first bucket's launch to the end of backward's computation (the engine's
  // final callback). comm - overlap is the wait after backward.
  double comm_span_seconds = 0;
  double overlap_span_seconds = 0;
};

class DTLAUNCH_DDP_API DistributedDataParallel {
 public:
  // Broadcasts rank 0's parameters and buffers and registers the gradient hooks.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          std::shared_ptr<ProcessGroup> group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  const std::shared_ptr<torch::nn::Module>& module() const noexcept { return module_; }
  ProcessGroup& group() const noexcept { return *group_; }

  // While a NoSync is alive, backward accumulates gradients locally without communication
  // (gradient accumulation). The first backward after it ends synchronises the sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Waits for every bucket and writes the averaged gradients back. Runs automatically at the
  // end of each backward (the autograd engine's final callback), so after loss.backward()
  // the gradients are already averaged; calling it again is a no-op.
  void finish_gradient_sync();

  // Buckets in launch order, as positions among the parameters that require grad, counted in
  // module()->parameters() order (with every parameter requiring grad: indices into it).
  const std::vector<std::vector<size_t>>& buckets() const noexcept;
  DdpStats stats() const;
  void reset_stats();

 private:
  struct Reducer;
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<Reducer> reducer_;
};

// Hosts a job's store in this process, so that it outlives every rank: the ranks, rank 0
// included, connect to it with DTLAUNCH_STORE_HOSTED=1 (what dtlaunch-store runs). Live recovery
// can then replace rank 0 too.
class DTLAUNCH_DDP_API StoreHost {
 public:
  // Listens on `port` of every address of this machine; 0: a free port, see port().
  explicit StoreHost(int port);
  ~StoreHost();
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;
  int port() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Live recovery (docs/ddp.md, "Live recovery"): a program that registers its training state and
// runs its steps through LiveRun::step survives the loss of a peer without a restart. The
// survivors keep their processes; a replacement started with DTLAUNCH_DDP_LIVE_JOIN=1 and the lost
// rank's RANK (dtlaunch job --live starts it) takes the lost rank's place, and one survivor sends
// it the state over the re-formed group, in memory. Gloo and NCCL.

// What a replacement needs to go on exactly where the survivors are, in the program's own terms.
// Serialised with torch::serialize archives, with the random generators' states added: the CPU's,
// and the CUDA generator of this rank's device (DTLAUNCH_CUDA_DEVICE, else LOCAL_RANK) where
// LibTorch has CUDA. Every rank is assumed to draw alike (seeded alike, as DDP needs anyway).
class DTLAUNCH_DDP_API TrainingState {
 public:
  using Save = std::function<void(torch::serialize::OutputArchive&)>;
  using Load = std::function<void(torch::serialize::InputArchive&)>;

  // `step` counts the completed steps: after a loss the group takes the state of a rank at the
  // highest. The body given to LiveRun::step increments it last, after its last collective.
  explicit TrainingState(int64_t& step) : step_(&step) {}
  // Parameters and buffers, written in place (the optimizer and DDP keep their tensors).
  TrainingState& add(const std::string& name, torch::nn::Module& module);
  TrainingState& add(const std::string& name, torch::optim::Optimizer& optimizer);
  TrainingState& add(const std::string& name, int64_t& counter);  // an epoch, a cursor
  TrainingState& add(const std::string& name, DistributedSampler& sampler);
  // Anything else: how to write it and read it back.
  TrainingState& add(const std::string& name, Save save, Load load);

  int64_t step() const noexcept { return *step_; }
  // One line per part: its name and what it holds (a module's tensors' names, dtypes and
  // shapes). A replacement whose description differs from the running job's is refused.
  std::string describe() const;
  // The whole state, and back: what a survivor sends and a replacement loads.
  std::string serialize() const;
  void deserialize(const std::string& bytes);

 private:
  struct Part {
    std::string name;
    Save save;
    Load load;
    std::function<std::string()> describe;
  };
  TrainingState& add(const std::string& name, Save save, Load load,
                     std::function<std::string()> describe);
  int64_t* step_;
  std::vector<Part> parts_;
};

class DTLAUNCH_DDP_API LiveRun {
 public:
  // init_process_group for a program that recovers live. It needs the heartbeat
  // (DTLAUNCH_DDP_HEARTBEAT_TIMEOUT > 0, the default). With DTLAUNCH_DDP_LIVE_JOIN=1 this process
  // replaces a lost rank: it waits (DTLAUNCH_DDP_LIVE_WAIT) until the survivors want its RANK,
  // joins them, and returns with `state` overwritten by a survivor's.
  explicit LiveRun(TrainingState& state, const InitOptions& options = {});
  ~LiveRun();
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

  // The same object through every recovery: give it to DistributedDataParallel. (A replacement's
  // first DistributedDataParallel skips its broadcast: its state came from a survivor.)
  std::shared_ptr<ProcessGroup> group() const;
  bool replacement() const noexcept;  // this process joined a running job
  int generation() const noexcept;    // recoveries of this group so far, as this process saw them

  // Runs one step. true: `body` returned. false: a peer was lost in it (the heartbeat's verdict),
  // replacements will come (DTLAUNCH_DDP_LIVE=1; else the loss is thrown), and the group
  // recovered: it tore the old group down, re-formed with the replacement in the
  // lost rank's place, agreed on the highest completed step and sent that rank's state to every
  // rank behind it; the state is now that step's, so call again. Throws the loss as it is when it
  // cannot recover: this rank was cut off, rank 0 (the store's host) was lost, or no replacement
  // came within DTLAUNCH_DDP_LIVE_WAIT. Any other error is thrown as it is.
  bool step(const std::function<void()>& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The bucket plan, a pure function. slot_bytes[i] and slot_kind[i] (e.g. the dtype) describe
// the gradients in the order they are expected to become ready. Returns buckets as positions
// into slot_bytes, each bucket holding only one kind; a bucket closes once its size reaches
// cap_bytes (a gradient larger than the cap gets a bucket of its own), each kind's first bucket
// once it reaches min(first_cap_bytes, cap_bytes).
DTLAUNCH_DDP_API std::vector<std::vector<size_t>> plan_buckets(
    const std::vector<size_t>& slot_bytes, const std::vector<int>& slot_kind, size_t cap_bytes,
    size_t first_cap_bytes);

}  // namespace dtlaunch::ddp
