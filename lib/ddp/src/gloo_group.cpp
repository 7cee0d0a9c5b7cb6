// The Gloo backend: c10d::ProcessGroupGloo from LibTorch, over the rendezvous store, on CPU
// tensors. Its errors (gloo::IoException, c10::Error) become one-line errors naming the collective
// and the rank, of the kind the message shows (a timeout, a peer that closed its connection).
#include <ATen/ops/empty_like.h>
#include <sched.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "internal.hpp"
#include "shm_reduce.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

using GlooPG = c10d::ProcessGroupGloo;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return c10d::ReduceOp::SUM;  // Gloo has no AVG: the average is a sum divided afterwards.
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The tensor Gloo works on: the caller's own when Gloo can take it as it is, else a contiguous
// copy. 16-bit floats go through float32: Gloo in LibTorch 1.13 has no bfloat16, and Debian's
// LibTorch 2.14 refuses float16 and bfloat16 alike ("Invalid scalar type", from Python too).
at::Tensor staging_for(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf)
    return t.to(at::kFloat).contiguous();
  return t.contiguous();
}

// The CPUs this process may run on (its affinity mask: a cgroup cpuset, srun --cpu-bind,
// dtlaunch --cpu-bind, taskset), not the machine's: under a Slurm cpuset hardware_concurrency
// reports the whole node.
unsigned allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<unsigned>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

namespace {

int gloo_threads_for(int requested, int local_world_size) {
  if (requested > 0) return requested;
  return automatic_gloo_threads(allowed_cpus(), std::max(1u, std::thread::hardware_concurrency()),
                                local_world_size);
}

Error failure(const std::string& what, const std::exception& e) {
  const std::string line = first_line(e);
  return Error(classify_backend_failure(line), "dtlaunch ddp: " + what + " failed: " + line);
}

class GlooWork final : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::function<void()> finish)
      : work_(std::move(work)), what_(std::move(what)), finish_(std::move(finish)) {}

  void wait() override {
    if (done_) return;
    try {
      work_->wait();
    } catch (const std::exception& e) {
      done_ = true;
      throw failure(what_, e);
    }
    if (finish_) finish_();
    done_ = true;
  }
  bool completed() override { return done_ || work_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::function<void()> finish_;
  bool done_ = false;
};

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(const WorkerEnv& env, GroupParts parts)
      : ProcessGroup(env, Backend::kGloo, at::Device(at::kCPU), parts.options.timeout,
                     std::move(parts.monitor)),
        store_(std::move(parts.store)) {
    const InitOptions& options = parts.options;
    auto opts = GlooPG::Options::create(options.timeout);
    opts->threads = gloo_threads_for(options.gloo_threads, env.local_world_size);
    try {
      if (!env.gloo_socket_ifname.empty()) {
        // A comma-separated list, as in PyTorch: one Gloo device per interface.
        std::string list = env.gloo_socket_ifname;
        for (size_t pos = 0; pos <= list.size();) {
          size_t comma = list.find(',', pos);
          if (comma == std::string::npos) comma = list.size();
          if (comma > pos)
            opts->devices.push_back(
                GlooPG::createDeviceForInterface(list.substr(pos, comma - pos)));
          pos = comma + 1;
        }
      } else if (is_loopback(env.master_addr)) {
        opts->devices.push_back(GlooPG::createDeviceForHostname("127.0.0.1"));
      } else {
        opts->devices.push_back(GlooPG::createDefaultDevice());
      }
      auto pg_store = c10::make_intrusive<c10d::PrefixStore>(store_keys::Gloo::kPrefix, store_);
      pg_ = c10::make_intrusive<GlooPG>(pg_store, env.rank, env.world_size, opts);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string line = first_line(e);
      throw Error(classify_backend_failure(line),
                  "dtlaunch ddp: rank " + std::to_string(env.rank) +
                      " could not connect Gloo to its peers: " + line);
    }
    // Every rank takes part, whether it wants shm or not, so that all decide alike.
    shm_ = ShmAllReduce::create(env, options.shm_all_reduce, parts.hier_all_reduce, *store_,
                                options.timeout, std::move(parts.peer_lost));
    if (shm_ && !shm_->slice_group().empty()) connect_slice_group(opts);
  }

  std::shared_ptr<Work> start_all_reduce(at::Tensor& tensor, ReduceOp op) override {
    check_cpu(tensor, "all_reduce");
    if (shm_ && ShmAllReduce::supports(tensor)) return shm_->start(tensor, op);
    drain_shm();
    at::Tensor buf = staging_for(tensor);
    std::vector<at::Tensor> bufs{buf};
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    auto work = call("all_reduce", [&] { return pg_->allreduce(bufs, o); });
    const bool staged = !buf.is_same(tensor);
    const int64_t world = size();
    at::Tensor target = tensor;  // shares the caller's storage
    return std::make_shared<GlooWork>(std::move(work), what("all_reduce"),
                                      [buf, target, staged, op, world]() mutable {
                                        if (op == ReduceOp::kAvg) buf.div_(world);
                                        if (staged) target.copy_(buf);
                                      });
  }

  std::shared_ptr<Work> start_broadcast(at::Tensor& tensor, int root) override {
    check_cpu(tensor, "broadcast");
    drain_shm();
    at::Tensor buf = staging_for(tensor);
    std::vector<at::Tensor> bufs{buf};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    auto work = call("broadcast", [&] { return pg_->broadcast(bufs, o); });
    at::Tensor target = tensor;
    return std::make_shared<GlooWork>(std::move(work), what("broadcast"), [buf, target]() mutable {
      if (!buf.is_same(target)) target.copy_(buf);
    });
  }

  std::vector<at::Tensor> run_all_gather(const at::Tensor& tensor) override {
    check_cpu(tensor, "all_gather");
    drain_shm();
    at::Tensor in = staging_for(tensor);
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size(); ++r) out[0].push_back(at::empty_like(in));
    std::vector<at::Tensor> ins{in};
    GlooWork(call("all_gather", [&] { return pg_->allgather(out, ins); }), what("all_gather"), {})
        .wait();
    if (in.scalar_type() != tensor.scalar_type())
      for (auto& t : out[0]) t = t.to(tensor.scalar_type());
    return out[0];
  }

  // A live recovery's state transfer (live.cpp): bytes from one rank to one other.
  std::shared_ptr<Work> point_to_point(at::Tensor& bytes, int peer, bool sending) {
    drain_shm();
    std::vector<at::Tensor> bufs{bytes};
    const char* op = sending ? "send" : "recv";
    auto work = call(op, [&] {
      return sending ? pg_->send(bufs, peer, kStateTag) : pg_->recv(bufs, peer, kStateTag);
    });
    return std::make_shared<GlooWork>(
        std::move(work), what(op) + (sending ? " to rank " : " from rank ") + std::to_string(peer),
        nullptr);
  }

  std::shared_ptr<Work> start_barrier() override {
    drain_shm();
    return std::make_shared<GlooWork>(call("barrier", [&] { return pg_->barrier(); }),
                                      what("barrier"), nullptr);
  }

 private:
  // The hierarchical all_reduce's part among nodes: this rank and the ranks that own the same
  // slice on the other nodes, in a Gloo group of their own (its own store prefix, its own
  // connections, which the heartbeat's verdict shuts like the others).
  void connect_slice_group(const c10::intrusive_ptr<GlooPG::Options>& main_opts) {
    const std::vector<int>& ranks = shm_->slice_group();
    const int index =
        static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
    auto opts = GlooPG::Options::create(main_opts->timeout);
    opts->devices = main_opts->devices;
    opts->threads = 1;
    const std::string what = "hierarchical all_reduce among nodes on rank " +
                             std::to_string(rank()) + " (slice " + std::to_string(shm_->slice()) +
                             ", with ranks " + format_ranks(ranks) + ")";
    try {
      auto slice_store = c10::make_intrusive<c10d::PrefixStore>(
          store_keys::Hier::slice_prefix(shm_->slice()), store_);
      slice_pg_ =
          c10::make_intrusive<GlooPG>(slice_store, index, static_cast<int>(ranks.size()), opts);
    } catch (const std::exception& e) {
      const std::string line = first_line(e);
      throw Error(classify_backend_failure(line),
                  "dtlaunch ddp: " + what + ": could not connect Gloo: " + line);
    }
    shm_->attach_inter_node([pg = slice_pg_, what](const at::Tensor& part, ReduceOp op) {
      std::vector<at::Tensor> bufs{part};
      c10d::AllreduceOptions o;
      o.reduceOp = to_c10d(op);
      c10::intrusive_ptr<c10d::Work> work;
      try {
        work = pg->allreduce(bufs, o);
      } catch (const std::exception& e) {
        throw failure(what, e);
      }
      return std::function<void()>([work, what] {
        try {
          work->wait();
        } catch (const std::exception& e) {
          throw failure(what, e);
        }
      });
    });
  }

  // Gloo collectives start after the shm all_reduces issued before them: the ranks then run all
  // collectives in issue order, and a caller's tensor is never in two collectives at once.
  void drain_shm() {
    if (shm_) shm_->drain();
  }

  std::string what(const char* op) const {
    return std::string("gloo ") + op + " on rank " + std::to_string(rank()) + " of " +
           std::to_string(size());
  }

  // Gloo reports bad arguments by throwing when the collective is issued.
  template <class F>
  c10::intrusive_ptr<c10d::Work> call(const char* op, F&& issue) {
    try {
      return issue();
    } catch (const std::exception& e) {
      throw failure(what(op), e);
    }
  }

  void check_cpu(const at::Tensor& t, const char* op) const {
    if (!t.device().is_cpu())
      throw Error(ErrorKind::kConfig, std::string("dtlaunch ddp: ") + op +
                                          " on the gloo backend needs a CPU tensor, got " +
                                          t.device().str());
  }

  static constexpr int kStateTag = 7411;  // no other send or recv runs on pg_

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<GlooPG> pg_;
  c10::intrusive_ptr<GlooPG> slice_pg_;  // across nodes (connect_slice_group)
  std::unique_ptr<ShmAllReduce> shm_;    // null: every all_reduce goes through Gloo
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(const WorkerEnv& env, GroupParts parts) {
  return std::make_shared<GlooGroup>(env, std::move(parts));
}

std::shared_ptr<Work> gloo_point_to_point(ProcessGroup& group, at::Tensor& bytes, int peer,
                                          bool sending) {
  auto* gloo = dynamic_cast<GlooGroup*>(&group);
  if (gloo == nullptr)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: live recovery sends its state over Gloo only");
  return gloo->point_to_point(bytes, peer, sending);
}

}  // namespace dtlaunch::ddp::detail
