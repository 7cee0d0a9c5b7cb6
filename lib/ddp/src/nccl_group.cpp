// The NCCL backend, on NCCL and the CUDA runtime directly: Debian's LibTorch is CPU-only and its
// c10/cuda headers do not compile, so there is no ProcessGroupNCCL to reuse. The unique id goes
// through the rendezvous store; collectives run on a stream of this group's own.
//
// Tensors: CUDA tensors (a CUDA build of LibTorch, DTLAUNCH_DDP_TORCH_CUDA) are reduced in place,
// after the caller's current stream (an event orders NCCL's stream after it). CPU tensors go
// through device memory allocated in stream order; with pageable host memory the copy back
// makes such a call effectively synchronous.
#include <cuda_runtime.h>
#include <nccl.h>

#include "ddp_config.hpp"
#if DTLAUNCH_DDP_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <ATen/ops/empty.h>

#include <thread>

#include "core/text.hpp"
#include "internal.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

[[noreturn]] void fail(const std::string& what, ErrorKind kind = ErrorKind::kBackend) {
  throw Error(kind, "dtlaunch ddp: " + what);
}

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    fail(std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

ErrorKind nccl_kind(ncclResult_t res) {
  return res == ncclRemoteError ? ErrorKind::kPeerLost : ErrorKind::kBackend;
}

// A non-blocking communicator (see the constructor) may answer ncclInProgress to any call: the
// call goes on in the background and its outcome shows in ncclCommGetAsyncError.
void nccl_check(ncclResult_t res, const char* what) {
  if (res != ncclSuccess && res != ncclInProgress)
    fail(std::string(what) + ": " + ncclGetErrorString(res), nccl_kind(res));
}

// Waits until a call on the non-blocking communicator has been enqueued (NCCL takes no more than
// the enqueue itself; the work goes on on the stream).
void settle(ncclComm_t comm, const std::string& what) {
  ncclResult_t state = ncclInProgress;
  while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress)
    std::this_thread::yield();
  if (state != ncclSuccess && state != ncclInProgress)
    fail(what + ": " + ncclGetErrorString(state), nccl_kind(state));
}

ncclDataType_t nccl_type(at::ScalarType t, const char* op) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    default:
      break;
  }
  throw Error(ErrorKind::kConfig,
              std::string("dtlaunch ddp: nccl ") + op + " has no dtype " + c10::toString(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Comm and stream, shared by the group and the collectives still in flight.
struct Comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  bool aborted = false;
  // The heartbeat's verdict (null without one): a wait that sees it aborts the communicator.
  std::shared_ptr<const std::atomic<bool>> peer_lost;

  ~Comm() {
    cudaSetDevice(device);
    // After the heartbeat's verdict, a communicator is aborted, never destroyed: ncclCommDestroy
    // finalizes with the peers, and a lost one would hold it forever (a live recovery tears the
    // group down this way while nothing of it is in flight).
    if (comm != nullptr && !aborted && peer_lost && peer_lost->load(std::memory_order_acquire)) {
      ncclCommAbort(comm);
      aborted = true;
    }
    if (comm != nullptr && !aborted) ncclCommDestroy(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, std::string what, std::chrono::milliseconds timeout,
           std::vector<at::Tensor> keep_alive, std::function<void()> finish)
      : comm_(std::move(comm)),
        what_(std::move(what)),
        timeout_(timeout),
        keep_alive_(std::move(keep_alive)),
        finish_(std::move(finish)) {
    cuda_check(cudaSetDevice(comm_->device), "cudaSetDevice");
    cuda_check(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(done_event_, comm_->stream), "cudaEventRecord");
  }
  ~NcclWork() override {
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  // Polls rather than cudaEventSynchronize, so that a rank that died or hangs becomes an error
  // after the timeout instead of a hang.
  void wait() override {
    if (done_) return;
    const auto deadline = Clock::now() + timeout_;
    for (unsigned spins = 0;; ++spins) {
      cudaError_t q = cudaEventQuery(done_event_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) cuda_check(q, (what_ + ": cudaEventQuery").c_str());
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_->comm, &async);
      if (comm_->peer_lost && comm_->peer_lost->load(std::memory_order_acquire)) {
        abort_comm();
        fail(what_ + " aborted (ncclCommAbort): the heartbeat declared a peer lost",
             ErrorKind::kPeerLost);
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_comm();
        fail(what_ + " failed: " + ncclGetErrorString(async), nccl_kind(async));
      }
      if (Clock::now() > deadline) {
        abort_comm();
        fail(what_ + " timed out: not finished within " + core::duration_text(timeout_) +
                 " (a rank died or stopped calling collectives)",
             ErrorKind::kTimeout);
      }
      if (spins < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    done_ = true;
    if (finish_) finish_();
    keep_alive_.clear();
  }

  bool completed() override { return done_ || cudaEventQuery(done_event_) == cudaSuccess; }

 private:
  void abort_comm() {
    if (!comm_->aborted) ncclCommAbort(comm_->comm);
    comm_->aborted = true;
    done_ = true;
  }

  std::shared_ptr<Comm> comm_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::vector<at::Tensor> keep_alive_;
  std::function<void()> finish_;
  cudaEvent_t done_event_ = nullptr;
  bool done_ = false;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(const WorkerEnv& env, GroupParts parts)
      : ProcessGroup(env, Backend::kNccl,
                     at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.device_index)),
                     parts.options.timeout, std::move(parts.monitor)),
        store_(std::move(parts.store)),
        comm_(std::make_shared<Comm>()) {
    const int count = cuda_device_count();
    if (env.device_index >= count)
      fail("rank " + std::to_string(env.rank) + " wants CUDA device " +
               std::to_string(env.device_index) + " (DTLAUNCH_CUDA_DEVICE, else LOCAL_RANK) but " +
               std::to_string(count) + " are visible",
           ErrorKind::kConfig);
    comm_->device = env.device_index;
    comm_->peer_lost = std::move(parts.peer_lost);
    cuda_check(cudaSetDevice(comm_->device), "cudaSetDevice");

    ncclUniqueId id;
    if (env.rank == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store_->set(store_keys::Nccl::unique_id(), std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      std::vector<uint8_t> bytes;
      try {
        bytes = store_->get(store_keys::Nccl::unique_id());
      } catch (const std::exception& e) {
        const std::string line = first_line(e);
        fail("rank " + std::to_string(env.rank) + " got no NCCL id from rank 0: " + line,
             classify_backend_failure(line));
      }
      if (bytes.size() != sizeof(id)) fail("the NCCL id in the store has the wrong size");
      std::copy(bytes.begin(), bytes.end(), reinterpret_cast<uint8_t*>(&id));
    }
    init_bounded(env, id, parts.options.timeout);
    cuda_check(cudaStreamCreateWithFlags(&comm_->stream, cudaStreamNonBlocking),
               "cudaStreamCreate");
  }

  std::shared_ptr<Work> start_all_reduce(at::Tensor& tensor, ReduceOp op) override {
    const ncclDataType_t type = nccl_type(tensor.scalar_type(), "all_reduce");
    const ncclRedOp_t red = nccl_op(op);
    const size_t count = static_cast<size_t>(tensor.numel());
    return run("all_reduce", tensor, count, count, [&](const void* in, void* out) {
      nccl_check(ncclAllReduce(in, out, count, type, red, comm_->comm, comm_->stream),
                 "ncclAllReduce");
    });
  }

  std::shared_ptr<Work> start_broadcast(at::Tensor& tensor, int root) override {
    const ncclDataType_t type = nccl_type(tensor.scalar_type(), "broadcast");
    const size_t count = static_cast<size_t>(tensor.numel());
    return run("broadcast", tensor, count, count, [&](const void* in, void* out) {
      nccl_check(ncclBroadcast(in, out, count, type, root, comm_->comm, comm_->stream),
                 "ncclBroadcast");
    });
  }

  std::vector<at::Tensor> run_all_gather(const at::Tensor& tensor) override {
    const ncclDataType_t type = nccl_type(tensor.scalar_type(), "all_gather");
    const size_t count = static_cast<size_t>(tensor.numel());
    at::Tensor out = at::empty({static_cast<int64_t>(size()) * tensor.numel()}, tensor.options());
    at::Tensor in = tensor.contiguous();
    run_into("all_gather", in, out, count, count * static_cast<size_t>(size()),
             count * static_cast<size_t>(rank()),
             [&](const void* src, void* dst) {
               nccl_check(ncclAllGather(src, dst, count, type, comm_->comm, comm_->stream),
                          "ncclAllGather");
             })
        ->wait();
    std::vector<at::Tensor> parts;
    for (int r = 0; r < size(); ++r)
      parts.push_back(out.narrow(0, static_cast<int64_t>(r) * tensor.numel(), tensor.numel())
                          .view(tensor.sizes()));
    return parts;
  }

  std::shared_ptr<Work> start_barrier() override {
    at::Tensor one = at::empty({1}, at::kFloat).fill_(1);
    return start_all_reduce(one, ReduceOp::kSum);
  }

 private:
  std::string what(const char* op) const {
    return std::string("nccl ") + op + " on rank " + std::to_string(rank()) + " of " +
           std::to_string(size());
  }

  template <class F>
  std::shared_ptr<Work> run(const char* op, at::Tensor& tensor, size_t in_count, size_t out_count,
                            F&& issue) {
    at::Tensor buf = tensor.contiguous();
    auto work = run_into(op, buf, buf, in_count, out_count, 0, std::forward<F>(issue));
    if (buf.is_same(tensor)) return work;
    // A non-contiguous tensor was reduced in a contiguous copy: copy back once done.
    return std::make_shared<CopyBack>(std::move(work), buf, tensor);
  }

  struct CopyBack final : Work {
    CopyBack(std::shared_ptr<Work> inner, at::Tensor from, at::Tensor to)
        : inner_(std::move(inner)), from_(std::move(from)), to_(std::move(to)) {}
    void wait() override {
      inner_->wait();
      if (from_.defined()) to_.copy_(from_);
      from_ = at::Tensor();
    }
    bool completed() override { return inner_->completed(); }
    std::shared_ptr<Work> inner_;
    at::Tensor from_, to_;
  };

  // Runs issue(in_ptr, out_ptr) on the group's stream; in and out are contiguous. Staged CPU
  // tensors use one device buffer with the input at in_offset elements, which is where NCCL
  // wants it for an in-place all_gather.
  template <class F>
  std::shared_ptr<Work> run_into(const char* op, const at::Tensor& in, const at::Tensor& out,
                                 size_t in_count, size_t out_count, size_t in_offset, F&& issue) {
    if (comm_->aborted) fail(what(op) + ": the communicator was aborted after an earlier error");
    cuda_check(cudaSetDevice(comm_->device), "cudaSetDevice");
    const size_t elem = in.element_size();
    if (in.is_cuda() || out.is_cuda()) {
#if DTLAUNCH_DDP_TORCH_CUDA
      if (!in.is_cuda() || !out.is_cuda() || in.device() != device() || out.device() != device())
        throw Error(ErrorKind::kConfig, "dtlaunch ddp: " + what(op) + " needs tensors on " +
                                            device().str() + ", got " + in.device().str());
      // NCCL's stream starts after whatever the caller queued on its current stream.
      cudaStream_t current =
          c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(comm_->device)).stream();
      cudaEvent_t ready = nullptr;
      cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
      cuda_check(cudaEventRecord(ready, current), "cudaEventRecord");
      cuda_check(cudaStreamWaitEvent(comm_->stream, ready, 0), "cudaStreamWaitEvent");
      cudaEventDestroy(ready);
      issue(in.data_ptr(), out.data_ptr());
      settle(comm_->comm, what(op));
      return std::make_shared<NcclWork>(comm_, what(op), timeout(),
                                        std::vector<at::Tensor>{in, out}, nullptr);
#else
      throw Error(ErrorKind::kConfig,
                  "dtlaunch ddp: " + what(op) + ": this LibTorch has no CUDA; pass CPU tensors");
#endif
    }
    // CPU tensors: staged through device memory allocated in stream order.
    void* dev = nullptr;
    const size_t out_bytes = out_count * elem;
    cudaStream_t s = comm_->stream;
    cuda_check(cudaMallocAsync(&dev, std::max<size_t>(out_bytes, 1), s), "cudaMallocAsync");
    void* dev_in = static_cast<char*>(dev) + in_offset * elem;
    cuda_check(cudaMemcpyAsync(dev_in, in.data_ptr(), in_count * elem, cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync");
    issue(dev_in, dev);
    settle(comm_->comm, what(op));
    cuda_check(cudaMemcpyAsync(out.data_ptr(), dev, out_bytes, cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync");
    cuda_check(cudaFreeAsync(dev, s), "cudaFreeAsync");
    return std::make_shared<NcclWork>(comm_, what(op), timeout(), std::vector<at::Tensor>{in, out},
                                      nullptr);
  }

  // ncclCommInitRank blocks until every rank has joined: a rank that died after the rendezvous
  // would hold the others forever. So the communicator is made non-blocking, polled, and aborted
  // at the deadline; the store says which ranks never got as far as NCCL's init, or never
  // finished it.
  void init_bounded(const WorkerEnv& env, const ncclUniqueId& id,
                    std::chrono::milliseconds timeout) {
    store_->set(store_keys::Nccl::joined(env.rank), std::vector<uint8_t>{1});
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t res = ncclCommInitRankConfig(&comm_->comm, env.world_size, id, env.rank, &config);
    const auto deadline = Clock::now() + timeout;
    while (res == ncclInProgress) {
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_->comm);
        comm_->aborted = true;
        fail("NCCL init timed out after " + core::duration_text(timeout) + " on rank " +
                 std::to_string(env.rank) + ": " + missing_from_init(env),
             ErrorKind::kTimeout);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm_->comm, &res) != ncclSuccess) break;
    }
    if (res != ncclSuccess) {
      if (comm_->comm != nullptr) ncclCommAbort(comm_->comm);
      comm_->aborted = true;
      fail("ncclCommInitRankConfig on rank " + std::to_string(env.rank) + ": " +
               ncclGetErrorString(res),
           nccl_kind(res));
    }
    store_->set(store_keys::Nccl::ready(env.rank), std::vector<uint8_t>{1});
  }

  std::string missing_from_init(const WorkerEnv& env) {
    std::vector<int> never, unfinished;
    try {
      for (int r = 0; r < env.world_size; ++r) {
        if (!store_->check({store_keys::Nccl::joined(r)}))
          never.push_back(r);
        else if (!store_->check({store_keys::Nccl::ready(r)}))
          unfinished.push_back(r);
      }
    } catch (const std::exception& e) {
      return "the store could not say which ranks are missing (" + first_line(e) + ")";
    }
    std::string out;
    if (!never.empty())
      out += "ranks " + format_ranks(never) + " never joined (died, or stuck before init)";
    if (!unfinished.empty())
      out += std::string(out.empty() ? "" : "; ") + "ranks " + format_ranks(unfinished) +
             " joined but did not finish";
    return out.empty() ? "every rank joined; NCCL's own connection setup did not finish" : out;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<Comm> comm_;
};

}  // namespace

int cuda_device_count() noexcept {
  int n = 0;
  // Without a driver this is cudaErrorInsufficientDriver (not NoDevice) and n is left alone.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::shared_ptr<ProcessGroup> make_nccl_group(const WorkerEnv& env, GroupParts parts) {
  return std::make_shared<NcclGroup>(env, std::move(parts));
}

}  // namespace dtlaunch::ddp::detail
