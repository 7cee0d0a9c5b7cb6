// DistributedDataParallel: gradient buckets all-reduced while backward still runs.
//
// Each parameter's AccumulateGrad node gets a post hook, which fires once the gradient has been
// accumulated into .grad (so accumulated gradients under no_sync are what gets reduced). The hook
// copies the gradient into its bucket; a bucket whose last gradient arrived is divided by the
// world size and its all-reduce started, in bucket order, so that every rank issues the same
// collectives in the same order. The first hook of a backward queues an engine final callback,
// which waits for every bucket and writes the averages back before backward() returns.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/error.hpp"
#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Broadcasts tensors from rank 0 in one collective per dtype rather than one per tensor.
void broadcast_coalesced(ProcessGroup& pg, const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (const auto& t : tensors)
    if (t.numel() > 0) by_type[t.scalar_type()].push_back(t);
  for (auto& [type, group] : by_type) {
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : group) flat_parts.push_back(t.detach().reshape(-1));
    at::Tensor flat = at::cat(flat_parts);
    pg.broadcast(flat, 0);
    int64_t offset = 0;
    for (auto& t : group) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace

struct DistributedDataParallel::Reducer : std::enable_shared_from_this<Reducer> {
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
    int64_t numel = 0;
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into Reducer::params
    at::Tensor flat;
    size_t pending = 0;
    std::shared_ptr<Work> work;
    Clock::time_point launched, completed;
    bool done = false;
  };

  // Fires after AccumulateGrad has written .grad. Holds the reducer weakly: the reducer owns
  // the hooks' nodes, not the other way round.
  struct ReadyHook final : torch::autograd::FunctionPostHook {
    ReadyHook(std::weak_ptr<Reducer> reducer, size_t index)
        : reducer_(std::move(reducer)), index_(index) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& /*inputs*/) override {
      if (auto r = reducer_.lock()) r->mark_ready(index_);
      return outputs;
    }
    std::weak_ptr<Reducer> reducer_;
    size_t index_;
  };

  ProcessGroup& pg;
  DdpOptions opts;
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  // The variable keeps only a weak reference to its AccumulateGrad node: without these the
  // node, and the hook on it, would vanish with the first temporary. (A shared_ptr up to
  // LibTorch 2.1x, an intrusive_ptr in 2.14: the type is taken from the function.)
  using NodeRef =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<NodeRef> accumulators;
  std::vector<uintptr_t> hook_keys;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  std::vector<std::vector<size_t>> bucket_params;
  std::vector<at::Tensor> buffers;

  std::mutex mu;
  std::vector<char> ready;
  size_t ready_count = 0;
  size_t next_launch = 0;
  bool sync_enabled = true;
  bool in_iteration = false;
  DdpStats stats;

  Reducer(ProcessGroup& group, DdpOptions options) : pg(group), opts(options) {}

  void build(torch::nn::Module& module) {
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      if (!item.value().requires_grad()) continue;
      params.push_back(item.value());
      names.push_back(item.key());
    }
    for (const auto& b : module.buffers(/*recurse=*/true)) buffers.push_back(b);
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      if (p.device() != params[0].device())
        throw Error(ErrorKind::kConfig, "dtlaunch ddp: parameters on several devices (" + names[0] +
                                            " on " + params[0].device().str() + ", " + names[i] +
                                            " on " + p.device().str() +
                                            "); put the module on one device");
      if (p.is_sparse())
        throw Error(ErrorKind::kConfig,
                    "dtlaunch ddp: sparse parameter " + names[i] + " is not supported");
    }

    // Gradients become ready roughly in reverse order of registration (the output layer first).
    const size_t n = params.size();
    std::vector<size_t> bytes(n);
    std::vector<int> kinds(n);
    for (size_t k = 0; k < n; ++k) {
      const auto& p = params[n - 1 - k];
      bytes[k] = static_cast<size_t>(p.numel()) * p.element_size();
      kinds[k] = static_cast<int>(p.scalar_type());
    }
    slots.resize(n);
    for (auto& positions : plan_buckets(bytes, kinds, opts.bucket_cap_bytes)) {
      Bucket b;
      int64_t offset = 0;
      for (size_t k : positions) {
        const size_t i = n - 1 - k;
        b.params.push_back(i);
        slots[i] = Slot{buckets.size(), offset, params[i].numel()};
        offset += params[i].numel();
      }
      b.flat = at::zeros({offset}, params[b.params.front()].options().requires_grad(false));
      b.pending = b.params.size();
      bucket_params.push_back(b.params);
      buckets.push_back(std::move(b));
    }
    ready.assign(n, 0);
  }

  void register_hooks() {
    std::weak_ptr<Reducer> self = shared_from_this();
    for (size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      hook_keys.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(self, i)));
      accumulators.push_back(std::move(acc));
    }
  }

  void remove_hooks() {
    for (size_t i = 0; i < accumulators.size(); ++i) accumulators[i]->del_post_hook(hook_keys[i]);
  }

  void mark_ready(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!sync_enabled) return;
    if (!in_iteration) {
      in_iteration = true;
      std::weak_ptr<Reducer> self = shared_from_this();
      torch::autograd::Engine::get_default_engine().queue_callback([self] {
        if (auto r = self.lock()) r->finish();
      });
    }
    if (ready[i]) {
      reset_iteration();
      throw Error(ErrorKind::kConfig, "dtlaunch ddp: parameter " + names[i] +
                                          " got its gradient twice in one backward");
    }
    ready[i] = 1;
    ++ready_count;
    const Slot& s = slots[i];
    const at::Tensor& grad = params[i].grad();
    at::Tensor dst = buckets[s.bucket].flat.narrow(0, s.offset, s.numel);
    if (grad.defined()) {
      if (grad.is_sparse()) {
        reset_iteration();
        throw Error(ErrorKind::kConfig,
                    "dtlaunch ddp: sparse gradient of " + names[i] + " is not supported");
      }
      dst.copy_(grad.reshape(-1));
    } else {
      dst.zero_();
    }
    --buckets[s.bucket].pending;
    launch_ready();
    poll();
  }

  // Starts the all-reduce of every complete bucket whose predecessors have started, so that
  // all ranks issue them in the same order whatever order their gradients arrive in.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      b.flat.div_(pg.size());
      b.launched = Clock::now();
      b.work = pg.all_reduce_async(b.flat, ReduceOp::kSum);
      if (in_iteration && ready_count < params.size()) ++stats.buckets_overlapped;
    }
  }

  // Notes completion times of buckets that finished while backward was still running.
  void poll() {
    for (size_t k = 0; k < next_launch; ++k) {
      Bucket& b = buckets[k];
      if (!b.done && b.work->completed()) {
        b.completed = Clock::now();
        b.done = true;
      }
    }
  }

  // Forgets the current iteration, once it is finished or after an error, so that the next
  // backward starts clean.
  void reset_iteration() {
    for (auto& b : buckets) {
      b.work.reset();
      b.done = false;
      b.pending = b.params.size();
    }
    std::fill(ready.begin(), ready.end(), 0);
    ready_count = 0;
    next_launch = 0;
    in_iteration = false;
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mu);
    if (!in_iteration) return;
    const auto backward_end = Clock::now();
    poll();

    std::vector<size_t> unready;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) unready.push_back(i);
    if (!unready.empty() && !opts.find_unused_parameters) {
      std::string list;
      for (size_t k = 0; k < unready.size() && k < 8; ++k)
        list += (k ? ", " : "") + names[unready[k]];
      if (unready.size() > 8) list += ", ... (" + std::to_string(unready.size()) + " in all)";
      reset_iteration();
      throw Error(ErrorKind::kConfig,
                  "dtlaunch ddp: rank " + std::to_string(pg.rank()) + ": " +
                      std::to_string(unready.size()) +
                      " parameter(s) got no gradient in this backward: " + list +
                      "; if that is intended, set DdpOptions::find_unused_parameters");
    }
    // Unused here: reduce zeros in their place (another rank may have used them).
    ready_count = params.size();  // backward is over: what starts now overlaps nothing
    for (size_t i : unready) {
      const Slot& s = slots[i];
      buckets[s.bucket].flat.narrow(0, s.offset, s.numel).zero_();
      --buckets[s.bucket].pending;
    }
    launch_ready();

    // A parameter that no rank used keeps its gradient, as in PyTorch: that needs the global
    // picture, one more small all-reduce, paid only with find_unused_parameters.
    std::vector<char> used_anywhere(params.size(), 1);
    if (opts.find_unused_parameters) {
      // On the parameters' device: a CPU LibTorch with the NCCL backend has CPU parameters.
      at::Tensor used =
          at::zeros({static_cast<int64_t>(params.size())},
                    at::TensorOptions().dtype(at::kFloat).device(params.front().device()));
      at::Tensor local = at::zeros({static_cast<int64_t>(params.size())}, at::kFloat);
      for (size_t i = 0; i < params.size(); ++i)
        local[static_cast<int64_t>(i)] = ready[i] ? 1.0 : 0.0;
      used.copy_(local);
      pg.all_reduce(used, ReduceOp::kMax);
      at::Tensor back = used.cpu();
      for (size_t i = 0; i < params.size(); ++i)
        used_anywhere[i] = back[static_cast<int64_t>(i)].item<float>() > 0.5f;
    }

    try {
      for (auto& b : buckets) {
        b.work->wait();
        if (!b.done) {
          b.completed = Clock::now();
          b.done = true;
        }
      }
    } catch (...) {
      reset_iteration();
      throw;
    }
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        if (!used_anywhere[i]) continue;
        const Slot& s = slots[i];
        at::Tensor avg =
            buckets[s.bucket].flat.narrow(0, s.offset, s.numel).view(params[i].sizes());
        at::Tensor& grad = params[i].mutable_grad();
        if (grad.defined())
          grad.copy_(avg);
        else
          grad = avg.clone();
      }
    }
    if (opts.broadcast_buffers && !buffers.empty()) broadcast_coalesced(pg, buffers);
    account(backward_end);
    reset_iteration();
  }

  // allreduce_seconds: the union of the buckets' [launched, completed] intervals; hidden: the
  // part of it before backward ended.
  void account(Clock::time_point backward_end) {
    std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
    for (const auto& b : buckets) spans.emplace_back(b.launched, std::max(b.completed, b.launched));
    std::sort(spans.begin(), spans.end());
    double total = 0, hidden = 0;
    for (size_t k = 0; k < spans.size();) {
      auto begin = spans[k].first, end = spans[k].second;
      for (++k; k < spans.size() && spans[k].first <= end; ++k)
        end = std::max(end, spans[k].second);
      total += seconds(end - begin);
      if (begin < backward_end) hidden += seconds(std::min(end, backward_end) - begin);
    }
    stats.iterations += 1;
    stats.buckets_reduced += buckets.size();
    stats.allreduce_seconds += total;
    stats.hidden_seconds += hidden;
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)) {
  if (!module_)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: DistributedDataParallel got no module");
  if (!group_)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: DistributedDataParallel got no process group");
  reducer_ = std::make_shared<Reducer>(*group_, options);
  reducer_->build(*module_);
  std::vector<at::Tensor> state = reducer_->params;
  for (const auto& p : module_->parameters(/*recurse=*/true))
    if (!p.requires_grad()) state.push_back(p);
  state.insert(state.end(), reducer_->buffers.begin(), reducer_->buffers.end());
  broadcast_coalesced(*group_, state);
  reducer_->register_hooks();
}

DistributedDataParallel::~DistributedDataParallel() {
  if (reducer_) reducer_->remove_hooks();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp) {
  std::lock_guard<std::mutex> lock(ddp_.reducer_->mu);
  previous_ = ddp_.reducer_->sync_enabled;
  ddp_.reducer_->sync_enabled = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  std::lock_guard<std::mutex> lock(ddp_.reducer_->mu);
  ddp_.reducer_->sync_enabled = previous_;
}

void DistributedDataParallel::finish_gradient_sync() {
  reducer_->finish();
}

const std::vector<std::vector<size_t>>& DistributedDataParallel::buckets() const noexcept {
  return reducer_->bucket_params;
}

DdpStats DistributedDataParallel::stats() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->stats;
}

void DistributedDataParallel::reset_stats() {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  reducer_->stats = DdpStats{};
}

}  // namespace dtlaunch::ddp
