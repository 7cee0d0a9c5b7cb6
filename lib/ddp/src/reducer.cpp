// DistributedDataParallel: gradient buckets all-reduced while backward still runs.
//
// Each parameter's AccumulateGrad node gets a post hook, which fires once the gradient has been
// accumulated into .grad (so accumulated gradients under no_sync are what gets reduced). The hook
// copies the gradient into its bucket, unless .grad already is its place in the bucket
// (DdpOptions::gradient_as_bucket_view, from the second step on); a bucket whose last gradient
// arrived has its average all-reduced, in bucket order, so that every rank issues the same
// collectives in the same order. The first hook of a backward queues an engine final callback,
// which waits for every bucket and writes the averages back before backward() returns.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.hpp"
#include "dtlaunch/ddp.h"
#include "internal.hpp"
#include "settings.hpp"

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

// `grad` is `place` (a parameter's slot in its bucket) when it starts where the slot does and
// covers it densely: a user's own tensor never shares the bucket's memory.
bool is_place(const at::Tensor& grad, const at::Tensor& place) {
  return grad.defined() && grad.data_ptr() == place.data_ptr() && grad.numel() == place.numel() &&
         grad.is_contiguous();
}

// A tensor on the bucket's storage, shaped like the parameter. Made with set_, not view(): an
// autograd view could not be detached in place, which LibTorch's Optimizer::zero_grad does.
at::Tensor bucket_place(const at::Tensor& flat, int64_t offset, at::IntArrayRef sizes) {
  at::NoGradGuard no_grad;  // no strides given: contiguous ones
  return at::empty({0}, flat.options()).set_(flat.storage(), flat.storage_offset() + offset, sizes);
}

// glibc gives a freed block above its mmap threshold (128 KiB at first, raised as such blocks
// are freed) back with munmap, and trims the heap once 128 KiB at its top are free; every step's
// activations then come back as fresh pages, one fault per 4 KiB. A user's own setting wins.
void keep_step_memory() {
#if defined(__GLIBC__)
  if (!detail::set_in_environment(contract::setting::kMallocMmapThreshold))
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
  if (!detail::set_in_environment(contract::setting::kMallocTrimThreshold))
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace

struct DistributedDataParallel::Reducer : std::enable_shared_from_this<Reducer> {
 public:
  // Finds the parameters that require grad and plans their buckets; register_hooks() then
  // connects it to autograd (it needs shared_from_this, so not here).
  Reducer(ProcessGroup& group, DdpOptions options, torch::nn::Module& module);

  // Everything rank 0 broadcasts at construction: parameters (trainable or not) and buffers.
  std::vector<at::Tensor> initial_state(torch::nn::Module& module) const;
  void register_hooks();
  void remove_hooks();

  // The engine's final callback at the end of a synchronised backward (and
  // finish_gradient_sync()): a no-op outside an iteration.
  void finish();

  // Returns the previous setting.
  bool set_sync_enabled(bool enabled);
  const std::vector<std::vector<size_t>>& bucket_params() const noexcept { return bucket_params_; }
  DdpStats stats() const;
  void reset_stats();

 private:
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
    int64_t numel = 0;
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    at::Tensor flat;
    size_t pending = 0;
    std::shared_ptr<Work> work;
    Clock::time_point launched, completed;
    bool done = false;
  };
  // Fires after AccumulateGrad has written .grad. Holds the reducer weakly: the reducer owns
  // the hooks' nodes, not the other way round.
  struct ReadyHook;

  void plan(const std::vector<at::Tensor>& params);
  void mark_ready(size_t i);
  void launch_ready();
  void poll();
  void reset_iteration();

  // The parts of finish(), in order.
  std::vector<size_t> unready_params() const;
  void check_all_used(const std::vector<size_t>& unready);
  void reduce_zeros_for(const std::vector<size_t>& unready);
  std::vector<char> used_on_any_rank();
  void wait_for_buckets();
  void write_back(const std::vector<char>& used_anywhere);
  void account(Clock::time_point backward_end, Clock::time_point comm_end);

  ProcessGroup& pg_;
  DdpOptions opts_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> buffers_;
  // The variable keeps only a weak reference to its AccumulateGrad node: without these the
  // node, and the hook on it, would vanish with the first temporary. (A shared_ptr up to
  // LibTorch 2.1x, an intrusive_ptr in 2.14: the type is taken from the function.)
  using NodeRef =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));
  std::vector<NodeRef> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> bucket_params_;

  // Guards what follows: hooks may fire on the engine's worker threads.
  mutable std::mutex mu_;
  std::vector<char> ready_;
  size_t ready_count_ = 0;
  size_t next_launch_ = 0;
  bool sync_enabled_ = true;
  bool in_iteration_ = false;
  Clock::time_point comm_start_;  // this iteration's first launch
  DdpStats stats_;
};

struct DistributedDataParallel::Reducer::ReadyHook final : torch::autograd::FunctionPostHook {
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

DistributedDataParallel::Reducer::Reducer(ProcessGroup& group, DdpOptions options,
                                          torch::nn::Module& module)
    : pg_(group), opts_(options) {
  std::vector<at::Tensor> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names_.push_back(item.key());
  }
  for (const auto& b : module.buffers(/*recurse=*/true)) buffers_.push_back(b);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (p.device() != params[0].device())
      throw Error(ErrorKind::kConfig, "dtlaunch ddp: parameters on several devices (" + names_[0] +
                                          " on " + params[0].device().str() + ", " + names_[i] +
                                          " on " + p.device().str() +
                                          "); put the module on one device");
    if (p.is_sparse())
      throw Error(ErrorKind::kConfig,
                  "dtlaunch ddp: sparse parameter " + names_[i] + " is not supported");
  }
  plan(params);
  params_ = std::move(params);
}

void DistributedDataParallel::Reducer::plan(const std::vector<at::Tensor>& params) {
  // Gradients become ready roughly in reverse order of registration (the output layer first).
  const size_t n = params.size();
  std::vector<size_t> bytes(n);
  std::vector<int> kinds(n);
  for (size_t k = 0; k < n; ++k) {
    const auto& p = params[n - 1 - k];
    bytes[k] = static_cast<size_t>(p.numel()) * p.element_size();
    kinds[k] = static_cast<int>(p.scalar_type());
  }
  slots_.resize(n);
  for (auto& positions :
       plan_buckets(bytes, kinds, opts_.bucket_cap_bytes, opts_.first_bucket_cap_bytes)) {
    Bucket b;
    int64_t offset = 0;
    for (size_t k : positions) {
      const size_t i = n - 1 - k;
      b.params.push_back(i);
      slots_[i] = Slot{buckets_.size(), offset, params[i].numel()};
      offset += params[i].numel();
    }
    b.flat = at::zeros({offset}, params[b.params.front()].options().requires_grad(false));
    b.pending = b.params.size();
    bucket_params_.push_back(b.params);
    buckets_.push_back(std::move(b));
  }
  ready_.assign(n, 0);
}

std::vector<at::Tensor> DistributedDataParallel::Reducer::initial_state(
    torch::nn::Module& module) const {
  std::vector<at::Tensor> state = params_;
  for (const auto& p : module.parameters(/*recurse=*/true))
    if (!p.requires_grad()) state.push_back(p);
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  return state;
}

void DistributedDataParallel::Reducer::register_hooks() {
  std::weak_ptr<Reducer> self = shared_from_this();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(self, i)));
    accumulators_.push_back(std::move(acc));
  }
}

void DistributedDataParallel::Reducer::remove_hooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

bool DistributedDataParallel::Reducer::set_sync_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(sync_enabled_, enabled);
}

DdpStats DistributedDataParallel::Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DistributedDataParallel::Reducer::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = DdpStats{};
}

void DistributedDataParallel::Reducer::mark_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_enabled_) return;
  if (!in_iteration_) {
    in_iteration_ = true;
    std::weak_ptr<Reducer> self = shared_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (auto r = self.lock()) r->finish();
    });
  }
  if (ready_[i]) {
    reset_iteration();
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: parameter " + names_[i] + " got its gradient twice in one backward");
  }
  ready_[i] = 1;
  ++ready_count_;
  const Slot& s = slots_[i];
  const at::Tensor& grad = params_[i].grad();
  at::Tensor dst = buckets_[s.bucket].flat.narrow(0, s.offset, s.numel);
  if (grad.defined()) {
    if (grad.is_sparse()) {
      reset_iteration();
      throw Error(ErrorKind::kConfig,
                  "dtlaunch ddp: sparse gradient of " + names_[i] + " is not supported");
    }
    if (!is_place(grad, dst)) dst.copy_(grad.reshape(-1));
  } else {
    dst.zero_();
  }
  --buckets_[s.bucket].pending;
  try {
    launch_ready();
    poll();
  } catch (...) {
    reset_iteration();  // the engine drops the final callback of a failed backward
    throw;
  }
}

// Starts the all-reduce of every complete bucket whose predecessors have started, so that
// all ranks issue them in the same order whatever order their gradients arrive in.
void DistributedDataParallel::Reducer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    // float and double on the CPU: the all_reduce averages, so that the shared-memory paths
    // divide only the share each rank reduces (no pass over the whole bucket). Other dtypes are
    // divided first, as PyTorch does, so that a half-precision sum cannot overflow; CUDA too.
    // (Dividing while copying the gradient in, at::div_out(dst, grad, n) with an integer
    // Scalar, took 5x as long as copy_ plus div_ in LibTorch 1.13: docs/benchmarks.md.)
    const bool average_in_all_reduce =
        b.flat.device().is_cpu() &&
        (b.flat.scalar_type() == at::kFloat || b.flat.scalar_type() == at::kDouble);
    if (!average_in_all_reduce) b.flat.div_(pg_.size());
    b.launched = Clock::now();
    if (next_launch_ == 1) comm_start_ = b.launched;
    b.work = pg_.all_reduce_async(b.flat, average_in_all_reduce ? ReduceOp::kAvg : ReduceOp::kSum);
    if (in_iteration_ && ready_count_ < params_.size()) ++stats_.buckets_overlapped;
  }
}

// Notes completion times of buckets that finished while backward was still running.
void DistributedDataParallel::Reducer::poll() {
  for (size_t k = 0; k < next_launch_; ++k) {
    Bucket& b = buckets_[k];
    if (!b.done && b.work->completed()) {
      b.completed = Clock::now();
      b.done = true;
    }
  }
}

// Forgets the current iteration, once it is finished or after an error, so that the next
// backward starts clean.
void DistributedDataParallel::Reducer::reset_iteration() {
  for (auto& b : buckets_) {
    b.work.reset();
    b.done = false;
    b.pending = b.params.size();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  ready_count_ = 0;
  next_launch_ = 0;
  in_iteration_ = false;
}

void DistributedDataParallel::Reducer::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_iteration_) return;
  const auto backward_end = Clock::now();
  // A failed collective (a lost peer that LiveRun recovers from) leaves no half iteration behind.
  try {
    poll();
    const std::vector<size_t> unready = unready_params();
    check_all_used(unready);
    reduce_zeros_for(unready);
    const std::vector<char> used_anywhere = used_on_any_rank();
    wait_for_buckets();
    write_back(used_anywhere);
    const auto comm_end = Clock::now();
    if (opts_.broadcast_buffers && !buffers_.empty()) broadcast_coalesced(pg_, buffers_);
    account(backward_end, comm_end);
  } catch (...) {
    reset_iteration();
    throw;
  }
  reset_iteration();
}

std::vector<size_t> DistributedDataParallel::Reducer::unready_params() const {
  std::vector<size_t> unready;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unready.push_back(i);
  return unready;
}

void DistributedDataParallel::Reducer::check_all_used(const std::vector<size_t>& unready) {
  if (unready.empty() || opts_.find_unused_parameters) return;
  std::string list;
  for (size_t k = 0; k < unready.size() && k < 8; ++k) list += (k ? ", " : "") + names_[unready[k]];
  if (unready.size() > 8) list += ", ... (" + std::to_string(unready.size()) + " in all)";
  reset_iteration();
  throw Error(ErrorKind::kConfig,
              "dtlaunch ddp: rank " + std::to_string(pg_.rank()) + ": " +
                  std::to_string(unready.size()) +
                  " parameter(s) got no gradient in this backward: " + list +
                  "; if that is intended, set DdpOptions::find_unused_parameters");
}

// Unused here: reduce zeros in their place (another rank may have used them).
void DistributedDataParallel::Reducer::reduce_zeros_for(const std::vector<size_t>& unready) {
  ready_count_ = params_.size();  // backward is over: what starts now overlaps nothing
  for (size_t i : unready) {
    const Slot& s = slots_[i];
    at::Tensor place = buckets_[s.bucket].flat.narrow(0, s.offset, s.numel);
    // A gradient in the bucket leaves it first: a parameter no rank used keeps its gradient.
    at::Tensor& grad = params_[i].mutable_grad();
    if (is_place(grad, place)) grad = grad.clone();
    place.zero_();
    --buckets_[s.bucket].pending;
  }
  launch_ready();
}

// A parameter that no rank used keeps its gradient, as in PyTorch: that needs the global
// picture, one more small all-reduce, paid only with find_unused_parameters.
std::vector<char> DistributedDataParallel::Reducer::used_on_any_rank() {
  std::vector<char> used_anywhere(params_.size(), 1);
  if (!opts_.find_unused_parameters) return used_anywhere;
  // On the parameters' device: a CPU LibTorch with the NCCL backend has CPU parameters.
  at::Tensor used =
      at::zeros({static_cast<int64_t>(params_.size())},
                at::TensorOptions().dtype(at::kFloat).device(params_.front().device()));
  at::Tensor local = at::zeros({static_cast<int64_t>(params_.size())}, at::kFloat);
  for (size_t i = 0; i < params_.size(); ++i)
    local[static_cast<int64_t>(i)] = ready_[i] ? 1.0 : 0.0;
  used.copy_(local);
  pg_.all_reduce(used, ReduceOp::kMax);
  at::Tensor back = used.cpu();
  for (size_t i = 0; i < params_.size(); ++i)
    used_anywhere[i] = back[static_cast<int64_t>(i)].item<float>() > 0.5f;
  return used_anywhere;
}

void DistributedDataParallel::Reducer::wait_for_buckets() {
  try {
    for (auto& b : buckets_) {
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
}

void DistributedDataParallel::Reducer::write_back(const std::vector<char>& used_anywhere) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!used_anywhere[i]) continue;
    const Slot& s = slots_[i];
    const at::Tensor& flat = buckets_[s.bucket].flat;
    at::Tensor avg = flat.narrow(0, s.offset, s.numel);
    at::Tensor& grad = params_[i].mutable_grad();
    if (is_place(grad, avg)) continue;  // it holds the average already
    if (opts_.gradient_as_bucket_view && params_[i].is_contiguous())
      grad = bucket_place(flat, s.offset, params_[i].sizes());
    else if (grad.defined())
      grad.copy_(avg.view(params_[i].sizes()));
    else
      grad = avg.view(params_[i].sizes()).clone();
  }
}

// allreduce_seconds: the union of the buckets' [launched, completed] intervals; hidden: the
// part of it before backward ended. The spans as PyTorch's Reducer measures them go alongside.
void DistributedDataParallel::Reducer::account(Clock::time_point backward_end,
                                               Clock::time_point comm_end) {
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
  for (const auto& b : buckets_) spans.emplace_back(b.launched, std::max(b.completed, b.launched));
  std::sort(spans.begin(), spans.end());
  double total = 0, hidden = 0;
  for (size_t k = 0; k < spans.size();) {
    auto begin = spans[k].first, end = spans[k].second;
    for (++k; k < spans.size() && spans[k].first <= end; ++k) end = std::max(end, spans[k].second);
    total += seconds(end - begin);
    if (begin < backward_end) hidden += seconds(std::min(end, backward_end) - begin);
  }
  stats_.iterations += 1;
  stats_.buckets_reduced += buckets_.size();
  stats_.allreduce_seconds += total;
  stats_.hidden_seconds += hidden;
  stats_.comm_span_seconds += seconds(comm_end - comm_start_);
  stats_.overlap_span_seconds += seconds(std::max(backward_end, comm_start_) - comm_start_);
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)) {
  if (!module_)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: DistributedDataParallel got no module");
  if (!group_)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: DistributedDataParallel got no process group");
  if (options.keep_step_memory) keep_step_memory();
  reducer_ = std::make_shared<Reducer>(*group_, options, *module_);
  // A live replacement's state came from a survivor (LiveRun), which broadcasts nothing now.
  if (!detail::take_initial_broadcast_skip(*group_))
    broadcast_coalesced(*group_, reducer_->initial_state(*module_));
  reducer_->register_hooks();
}

DistributedDataParallel::~DistributedDataParallel() {
  if (reducer_) reducer_->remove_hooks();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp_.reducer_->set_sync_enabled(false)) {}

DistributedDataParallel::NoSync::~NoSync() {
  ddp_.reducer_->set_sync_enabled(previous_);
}

void DistributedDataParallel::finish_gradient_sync() {
  reducer_->finish();
}

const std::vector<std::vector<size_t>>& DistributedDataParallel::buckets() const noexcept {
  return reducer_->bucket_params();
}

DdpStats DistributedDataParallel::stats() const {
  return reducer_->stats();
}

void DistributedDataParallel::reset_stats() {
  reducer_->reset_stats();
}

}  // namespace dtlaunch::ddp
