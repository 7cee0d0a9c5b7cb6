// One rank of a multi-process DDP test. ddp_proc_test starts N copies with RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT set, and checks their exit status and output. Each scenario checks
// its results against definitions computed locally and prints what it compared; an error prints
// "ERROR: <message>" and exits 3.
//
//   ddp_worker collectives   all_reduce/broadcast/all_gather/barrier against their definitions
//   ddp_worker train         N-rank DDP vs one process on the whole batch
//   ddp_worker unused        unused parameters: the default error, and find_unused_parameters
//   ddp_worker rendezvous    init only (DDP_TEST_TIMEOUT_MS bounds it), then a barrier
//   ddp_worker peer-exit     ranks other than 0 leave after init; rank 0's all_reduce must fail
//   ddp_worker skip          3 collectives, then rank 1 skips the 4th and stays away a while
//   ddp_worker kill          collectives until rank DDP_TEST_VICTIM SIGKILLs itself after #5
//   ddp_worker check-shape   rank 1's 3rd all_reduce has another shape (DTLAUNCH_DDP_CHECK=1)
//   ddp_worker check-op      rank 1 calls all_gather where the others call all_reduce
//   ddp_worker late          rank DDP_TEST_LATE_RANK comes 1.5 s (DDP_TEST_LATE_MS) late; then a
//   barrier ddp_worker straggle      60 steps of 3 all_reduces; rank DDP_TEST_STRAGGLER (if set)
//   sleeps
//                            20 ms before each step
//   ddp_worker dump          60 all_reduces; each rank sends itself SIGUSR2 before the 30th (2 s
//                            late, once its clock is measured) and
//                            goes on; at the end it waits for its dump file in
//                            DTLAUNCH_DDP_TRACE_DIR. With DDP_TEST_OWN_USR2=1 the program
//                            handles SIGUSR2 itself (installed before init): no dump then
//   ddp_worker shm-vs-gloo   every all_reduce twice: on the group (shared memory where it can)
//                            and on a second group with shm off (port DDP_TEST_PORT2); the
//                            results must be bit-identical
//   ddp_worker shm-stream    500 back-to-back async all_reduces of varying sizes, with Gloo
//                            collectives and Gloo-only dtypes in between, waited at the end
//   ddp_worker shm-mismatch  rank 1's 3rd all_reduce has 5 elements, the others' 4 (no check)
// DDP_TEST_SMALL_SHM_RANK=R: rank R first mounts a 1 MiB tmpfs of its own on /dev/shm (a
// private mount namespace; needs CAP_SYS_ADMIN, else it prints "small-shm: not permitted"), so
// that creating or opening the shm all_reduce's segment fails there.
// DDP_TEST_RANK_ENV=R:NAME=VALUE: rank R runs with NAME=VALUE, the others as they are.
// DDP_TEST_NODES=N0,N1,...: rank R declares itself on node N_R (NODE_RANK; nodes_if_asked).
// Every scenario prints "shm-segment: PATH" (this process's mapping of the shared-memory
// all_reduce's segment, "(deleted)" once unlinked) or "shm-segment: none" after init.
//   ddp_worker nccl-init-lost  2 ranks: rank 0 asks for NCCL, rank 1 for Gloo, so rank 1 passes
//                            the rendezvous and never joins NCCL's init: rank 0 must fail with
//                            kTimeout naming rank 1 (GPU machine only, scripts/gpu-check.sh)
//   ddp_worker nccl          the NCCL backend (GPU machine only, scripts/gpu-check.sh): the
//                            collectives on CUDA and CPU tensors, then training on the GPU
#include <sched.h>
#include <sys/mount.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "dtlaunch/ddp.h"

namespace ddp = dtlaunch::ddp;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cout << "FAIL: " << what << std::endl;
  }
}

std::chrono::milliseconds timeout_from_env() {
  const char* ms = std::getenv("DDP_TEST_TIMEOUT_MS");
  return std::chrono::milliseconds(ms ? std::atol(ms) : 60000);
}

std::shared_ptr<ddp::ProcessGroup> init(ddp::Backend backend) {
  ddp::InitOptions o;
  o.backend = backend;
  o.timeout = timeout_from_env();
  if (const char* ms = std::getenv("DDP_TEST_PROGRESS_MS"))
    o.progress_every = std::chrono::milliseconds(std::atol(ms));
  if (const char* ms = std::getenv("DDP_TEST_RENDEZVOUS_TIMEOUT_MS"))
    o.rendezvous_timeout = std::chrono::milliseconds(std::atol(ms));
  // The default 2 Gloo threads: buckets then really run concurrently, and their tags must match.
  return ddp::init_process_group(o);
}

// ---------------------------------------------------------------------------------------------
// collectives

// Small integers and halves: exact in every dtype tested, and so are their sums and averages
// over 2 or 4 ranks, so results are compared for equality.
torch::Tensor input(int rank, int64_t n, torch::ScalarType type) {
  auto i = torch::arange(n, torch::kDouble);
  return ((rank + 1) * (torch::fmod(i, 7) - 3) + 0.5 * rank).to(type);
}

void collectives(ddp::ProcessGroup& pg, torch::Device dev) {
  const int ws = pg.size(), me = pg.rank();
  // Inputs are made on dev; expectations are computed on the CPU.
  auto input_on = [&](int rank, int64_t n, torch::ScalarType type) {
    return input(rank, n, type).to(dev);
  };
  const int64_t n = 37;
  int checks = 0;
  std::vector<torch::ScalarType> types = {torch::kFloat, torch::kDouble, torch::kHalf,
                                          torch::kBFloat16};
  for (auto type : types) {
    const std::string tname = c10::toString(type);
    std::vector<torch::Tensor> all;
    for (int r = 0; r < ws; ++r) all.push_back(input(r, n, torch::kDouble));
    auto stacked = torch::stack(all);
    const std::vector<std::pair<ddp::ReduceOp, torch::Tensor>> cases = {
        {ddp::ReduceOp::kSum, stacked.sum(0)},
        {ddp::ReduceOp::kAvg, stacked.mean(0)},
        {ddp::ReduceOp::kMin, std::get<0>(stacked.min(0))},
        {ddp::ReduceOp::kMax, std::get<0>(stacked.max(0))}};
    for (const auto& [op, expected] : cases) {
      auto t = input_on(me, n, type);
      pg.all_reduce(t, op);
      check(t.scalar_type() == type, "dtype kept");
      check(torch::equal(t.cpu().to(torch::kDouble), expected),
            "all_reduce " + std::string(ddp::to_string(op)) + " " + tname);
      ++checks;
    }
    for (int root = 0; root < ws; ++root) {
      auto t = input_on(me, n, type);
      pg.broadcast(t, root);
      check(torch::equal(t.cpu(), input(root, n, type)),
            "broadcast root " + std::to_string(root) + " " + tname);
      ++checks;
    }
    auto mine = input_on(me, n, type).view({37, 1});
    auto gathered = pg.all_gather(mine);
    check(static_cast<int>(gathered.size()) == ws, "all_gather count");
    for (int r = 0; r < ws && r < static_cast<int>(gathered.size()); ++r) {
      check(gathered[static_cast<size_t>(r)].sizes() == mine.sizes(), "all_gather shape");
      check(torch::equal(gathered[static_cast<size_t>(r)].cpu(), input(r, n, type).view({37, 1})),
            "all_gather rank " + std::to_string(r) + " " + tname);
      ++checks;
    }
  }
  // Integers: sum/min/max (avg is only for floating types and must be refused).
  {
    auto t = torch::full({5}, me + 1, torch::kLong).to(dev);
    pg.all_reduce(t, ddp::ReduceOp::kSum);
    check(torch::equal(t.cpu(), torch::full({5}, ws * (ws + 1) / 2, torch::kLong)), "int64 sum");
    auto m = torch::full({5}, me + 1, torch::kLong).to(dev);
    pg.all_reduce(m, ddp::ReduceOp::kMax);
    check(torch::equal(m.cpu(), torch::full({5}, ws, torch::kLong)), "int64 max");
    bool refused = false;
    try {
      auto a = torch::ones({2}, torch::kLong).to(dev);
      pg.all_reduce(a, ddp::ReduceOp::kAvg);
    } catch (const std::exception& e) {
      refused = std::string(e.what()).find("avg needs a floating tensor") != std::string::npos;
    }
    check(refused, "int64 avg refused");
    checks += 3;
  }
  // A non-contiguous tensor is reduced in place, through its view.
  {
    auto base = input_on(me, 12, torch::kFloat).view({3, 4});
    auto view = base.t();
    pg.all_reduce(view, ddp::ReduceOp::kSum);
    auto expected = torch::zeros({12}, torch::kDouble);
    for (int r = 0; r < ws; ++r) expected += input(r, 12, torch::kDouble);
    check(torch::equal(base.cpu().to(torch::kDouble), expected.view({3, 4})), "non-contiguous sum");
    ++checks;
  }
  // Several in flight at once, waited in the reverse order.
  {
    std::vector<torch::Tensor> ts;
    std::vector<std::shared_ptr<ddp::Work>> works;
    // On a GPU, the inputs come out of kernels still queued on the current stream: the
    // collective must start after them.
    for (int k = 0; k < 3; ++k)
      ts.push_back(torch::full({1 << 20}, 1.0, torch::TensorOptions(dev)).mul((me + 1) * (k + 1)));
    for (auto& t : ts) works.push_back(pg.all_reduce_async(t, ddp::ReduceOp::kSum));
    for (int k = 2; k >= 0; --k) works[static_cast<size_t>(k)]->wait();
    for (int k = 0; k < 3; ++k)
      check(torch::equal(ts[static_cast<size_t>(k)].cpu(),
                         torch::full({1 << 20}, (k + 1) * ws * (ws + 1) / 2, torch::kFloat)),
            "async " + std::to_string(k));
    checks += 3;
  }
  {
    bool refused = false;
    try {
      auto t = torch::ones({2}).to(dev);
      pg.broadcast(t, ws);
    } catch (const std::exception& e) {
      refused = std::string(e.what()).find("is not a rank") != std::string::npos;
    }
    check(refused, "broadcast root out of range refused");
    ++checks;
  }
  pg.barrier();
  std::cout << "collectives on " << dev << " rank " << me << " of " << ws << ": " << checks
            << " checks, " << failures << " failed" << std::endl;
}

// ---------------------------------------------------------------------------------------------
// train

struct NetImpl : torch::nn::Module {
  explicit NetImpl(double shift_value) {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 4));
    shift = register_buffer("shift", torch::full({4}, shift_value));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x))))) + shift;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::Tensor shift;
};
TORCH_MODULE(Net);

double max_param_diff(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

constexpr int kSteps = 5;
constexpr int64_t kBatch = 16;
// The float tolerance (docs/architecture.md, "Tests and their tolerances"): float32 sums in a
// different order drift by a few ulps per step; 1e-5 absolute is about 100 ulps at the parameters'
// magnitude.
constexpr double kTolerance = 1e-5;

// kDdpSeparateGrads: gradient_as_bucket_view off; kDdpGradsToNone: .grad reset to undefined
// before every step (so each backward makes new gradients, which DDP copies into its buckets).
enum class Mode { kDdp, kDdpAccumulate, kDdpSeparateGrads, kDdpGradsToNone, kNoCommunication };

// Trains a DDP copy on this rank's shard and a reference copy on the whole batch, from rank 0's
// initial parameters; returns max |DDP - reference| over the parameters.
double train_case(const std::shared_ptr<ddp::ProcessGroup>& pg, size_t cap, size_t first_cap,
                  Mode mode, size_t* buckets_out, torch::Device dev, ddp::DdpStats* stats_out) {
  const int ws = pg->size(), me = pg->rank();
  torch::manual_seed(7);
  auto xs = torch::randn({kSteps, kBatch, 8}).to(dev);
  auto ys = torch::randn({kSteps, kBatch, 4}).to(dev);

  // Rank-dependent initial parameters and buffer: DDP must replace them by rank 0's.
  torch::manual_seed(100 + static_cast<uint64_t>(me));
  Net net(static_cast<double>(me));
  torch::manual_seed(100);
  Net ref(0.0);
  net->to(dev);
  ref->to(dev);

  std::unique_ptr<ddp::DistributedDataParallel> model;
  if (mode != Mode::kNoCommunication) {
    ddp::DdpOptions o;
    o.bucket_cap_bytes = cap;
    o.first_bucket_cap_bytes = first_cap;
    o.gradient_as_bucket_view = mode != Mode::kDdpSeparateGrads;
    model = std::make_unique<ddp::DistributedDataParallel>(net.ptr(), pg, o);
    *buckets_out = model->buckets().size();
    check(torch::equal(net->shift.cpu(), torch::zeros({4})), "buffer broadcast from rank 0");
    check(max_param_diff(*net, *ref) == 0, "parameters broadcast from rank 0");
  } else {
    torch::NoGradGuard no_grad;
    auto src = ref->parameters(), dst = net->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    net->shift.zero_();
  }

  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const int64_t shard = kBatch / ws;
  for (int s = 0; s < kSteps; ++s) {
    auto x = xs[s].narrow(0, me * shard, shard), y = ys[s].narrow(0, me * shard, shard);
    if (mode == Mode::kDdpGradsToNone)
      net->zero_grad(/*set_to_none=*/true);
    else
      opt.zero_grad();
    if (mode == Mode::kDdpAccumulate) {
      const int64_t half = shard / 2;
      {
        auto guard = model->no_sync();
        auto loss = 0.5 * torch::mse_loss(net->forward(x.narrow(0, 0, half)), y.narrow(0, 0, half));
        loss.backward();
      }
      auto loss = 0.5 * torch::mse_loss(net->forward(x.narrow(0, half, shard - half)),
                                        y.narrow(0, half, shard - half));
      loss.backward();
    } else {
      torch::mse_loss(net->forward(x), y).backward();
    }
    opt.step();

    ref_opt.zero_grad();
    torch::mse_loss(ref->forward(xs[s]), ys[s]).backward();
    ref_opt.step();
  }
  if (model) {
    auto st = model->stats();
    *stats_out = st;
    check(st.iterations == kSteps, "stats.iterations");
    check(st.buckets_reduced == kSteps * model->buckets().size(), "stats.buckets_reduced");
    // Every bucket but the last starts while backward still produces gradients.
    check(st.buckets_overlapped == kSteps * (model->buckets().size() - 1),
          "stats.buckets_overlapped " + std::to_string(st.buckets_overlapped));
    check(st.hidden_seconds <= st.allreduce_seconds + 1e-9, "stats hidden <= total");
    // With bucket views, the gradients of a bucket share its memory; without, none do.
    const bool views = mode != Mode::kDdpSeparateGrads;
    const auto params = net->parameters();
    for (const auto& bucket : model->buckets())
      for (size_t k = 1; k < bucket.size(); ++k)
        check(params[bucket[k]].grad().is_alias_of(params[bucket[0]].grad()) == views,
              "gradients of one bucket " + std::string(views ? "share" : "do not share") +
                  " its memory");
  }
  // Every rank must hold bit-identical parameters.
  std::vector<torch::Tensor> flat;
  for (const auto& p : net->parameters()) flat.push_back(p.detach().reshape(-1));
  auto all = pg->all_gather(torch::cat(flat));
  for (int r = 1; r < ws && mode != Mode::kNoCommunication; ++r)
    check(torch::equal(all[0], all[static_cast<size_t>(r)]),
          "rank " + std::to_string(r) + " parameters equal rank 0's");
  return max_param_diff(*net, *ref);
}

void train(const std::shared_ptr<ddp::ProcessGroup>& pg, torch::Device dev) {
  struct Case {
    const char* name;
    size_t cap, first_cap;
    Mode mode;
    bool expect_match;
    size_t min_buckets;
  };
  constexpr size_t kNoFirst = SIZE_MAX;  // DdpOptions' default: no smaller first bucket
  const Case cases[] = {
      {"one-bucket", 25u << 20, kNoFirst, Mode::kDdp, true, 1},
      {"several-buckets", 512, kNoFirst, Mode::kDdp, true, 3},
      {"bucket-per-gradient", 0, kNoFirst, Mode::kDdp, true, 6},
      // fc3's gradients and fc2's bias (656 bytes), then the rest.
      {"small-first-bucket", 25u << 20, 600, Mode::kDdp, true, 2},
      {"no_sync-accumulation", 512, kNoFirst, Mode::kDdpAccumulate, true, 3},
      {"separate-gradients", 512, kNoFirst, Mode::kDdpSeparateGrads, true, 3},
      {"gradients-set-to-none", 512, kNoFirst, Mode::kDdpGradsToNone, true, 3},
      // The control: without communication a rank does not follow the whole batch.
      {"control-no-communication", 0, kNoFirst, Mode::kNoCommunication, false, 0},
  };
  for (const auto& c : cases) {
    if (!c.expect_match && pg->size() == 1) continue;  // one rank holds the whole batch anyway
    size_t buckets = 0;
    ddp::DdpStats st;
    double diff = train_case(pg, c.cap, c.first_cap, c.mode, &buckets, dev, &st);
    if (c.expect_match) {
      check(diff <= kTolerance, std::string(c.name) + ": max|ddp - whole batch| " +
                                    std::to_string(diff) + " > " + std::to_string(kTolerance));
      check(buckets >= c.min_buckets,
            std::string(c.name) + ": only " + std::to_string(buckets) + " buckets");
    } else {
      check(diff > 1e-3,
            std::string(c.name) + ": diff " + std::to_string(diff) + " should be large");
    }
    std::printf(
        "train on %s rank %d of %d: %-26s buckets=%zu max|diff|=%.3g allreduce=%.2fms "
        "hidden=%.2fms\n",
        dev.str().c_str(), pg->rank(), pg->size(), c.name, buckets, diff,
        st.allreduce_seconds * 1e3, st.hidden_seconds * 1e3);
  }
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// unused

struct BranchyImpl : torch::nn::Module {
  BranchyImpl() {
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(4, 3));
    c = register_module("c", torch::nn::Linear(4, 3));  // never used by any rank
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_b) {
    auto y = a(x);
    return use_b ? y + b(x) : y;
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(Branchy);

Branchy make_branchy() {
  torch::manual_seed(5);
  return Branchy();
}

// The definition DDP must meet: the mean over ranks of each parameter's local gradient (zero
// where there is none), each rank's from `backward(model, rank)` on a fresh copy.
std::vector<torch::Tensor> mean_of_local_grads(int ws,
                                               const std::function<void(Branchy&, int)>& backward) {
  std::vector<torch::Tensor> mean;
  for (int r = 0; r < ws; ++r) {
    Branchy local = make_branchy();
    backward(local, r);
    auto ps = local->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      auto g = ps[i].grad().defined() ? ps[i].grad() : torch::zeros_like(ps[i]);
      if (r == 0)
        mean.push_back(g / ws);
      else
        mean[i] += g / ws;
    }
  }
  return mean;
}

// c is used on no rank: it keeps no gradient; every other parameter's gradient is `expected`.
void check_unused_case(Branchy& net, const std::vector<torch::Tensor>& expected,
                       const std::string& what) {
  auto named = net->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& name = named[i].key();
    const auto& grad = named[i].value().grad();
    if (name.rfind("c.", 0) == 0) {
      check(!grad.defined(), name + ": unused on every rank keeps no gradient");
      continue;
    }
    const double diff = grad.defined() ? (grad - expected[i]).abs().max().item<double>() : HUGE_VAL;
    check(diff < 1e-6, name + ": " + what + ": max |diff| " + std::to_string(diff));
  }
}

void unused(const std::shared_ptr<ddp::ProcessGroup>& pg) {
  const int ws = pg->size(), me = pg->rank();
  torch::manual_seed(11);
  auto xs = torch::randn({ws, 6, 4});

  {  // Default: an unused parameter is an error that names it.
    Branchy net = make_branchy();
    ddp::DistributedDataParallel model(net.ptr(), pg);
    std::string msg;
    try {
      net->forward(xs[me], false).sum().backward();
    } catch (const std::exception& e) {
      msg = e.what();
    }
    check(msg.find("got no gradient") != std::string::npos &&
              msg.find("b.weight") != std::string::npos &&
              msg.find("c.bias") != std::string::npos &&
              msg.find("find_unused_parameters") != std::string::npos,
          "unused default error, got: " + msg);
    std::cout << "unused-default rank " << me << " error: " << msg.substr(0, msg.find('\n'))
              << std::endl;
  }
  {  // find_unused_parameters: rank 0 alone uses b; c is unused everywhere.
    Branchy net = make_branchy();
    ddp::DdpOptions o;
    o.find_unused_parameters = true;
    ddp::DistributedDataParallel model(net.ptr(), pg, o);
    net->forward(xs[me], me == 0).sum().backward();
    check_unused_case(
        net,
        mean_of_local_grads(
            ws, [&](Branchy& local, int r) { local->forward(xs[r], r == 0).sum().backward(); }),
        "averaged with zeros where unused");
    std::cout << "unused-find rank " << me << " checked " << net->parameters().size()
              << " parameters" << std::endl;
  }
  {  // Two backwards without zero_grad: every rank uses b in the first, none in the second. After
     // the first, b's gradient lives in its bucket; it must keep the first average, while a's
     // second gradient accumulates onto its first average.
    Branchy net = make_branchy();
    ddp::DdpOptions o;
    o.find_unused_parameters = true;
    ddp::DistributedDataParallel model(net.ptr(), pg, o);
    net->forward(xs[me], true).sum().backward();
    net->forward(xs[(me + 1) % ws], false).sum().backward();
    check_unused_case(
        net,
        mean_of_local_grads(ws,
                            [&](Branchy& local, int r) {
                              local->forward(xs[r], true).sum().backward();
                              local->forward(xs[(r + 1) % ws], false).sum().backward();
                            }),
        "two backwards, b unused in the second");
    std::cout << "unused-kept rank " << me << " checked " << net->parameters().size()
              << " parameters" << std::endl;
  }
}

// Each rank all-reduces a float32 [4] `count` times.
void all_reduces(ddp::ProcessGroup& pg, int count) {
  for (int i = 0; i < count; ++i) {
    auto t = torch::ones({4});
    pg.all_reduce(t);
    check(t[0].item<float>() == static_cast<float>(pg.size()), "all_reduce result");
  }
}

const char* kind_name(const std::exception& e) {
  auto* typed = dynamic_cast<const ddp::Error*>(&e);
  return typed ? ddp::to_string(typed->kind()) : "untyped";
}

volatile std::sig_atomic_t own_usr2_handled = 0;
extern "C" void own_usr2(int) {
  own_usr2_handled = 1;
}

// Returns the process status, or -1 to go on with the closing barrier.
int diagnostics(const std::string& scenario, ddp::ProcessGroup& pg) {
  if (scenario == "skip") {
    all_reduces(pg, 3);
    if (pg.rank() == 1) {
      // Stuck outside the runtime (a data loader, say) while the others wait in #4.
      std::this_thread::sleep_for(pg.timeout() + std::chrono::seconds(3));
      std::cout << "skipper done" << std::endl;
      return 0;
    }
    all_reduces(pg, 1);
    std::cout << "FAIL: all_reduce #4 without rank 1 returned" << std::endl;
    return 1;
  }
  if (scenario == "kill" || scenario == "freeze") {
    const int victim = std::atoi(std::getenv("DDP_TEST_VICTIM"));
    // DDP_TEST_FAULT_DELAY_MS: the victim waits before its fault, so that its heartbeats have
    // carried its position (the last collective it entered) to the others.
    const char* delay = std::getenv("DDP_TEST_FAULT_DELAY_MS");
    for (int i = 1;; ++i) {
      if (pg.rank() == victim && i == 6 && delay != nullptr)
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
      if (pg.rank() == victim && i == 6 && scenario == "freeze") {
        // Frozen, as a hung driver leaves a process; a child of its own ends it 8 s
        // (DDP_TEST_FREEZE_SECONDS) later.
        const char* freeze = std::getenv("DDP_TEST_FREEZE_SECONDS");
        const unsigned frozen_for =
            freeze != nullptr ? static_cast<unsigned>(std::atoi(freeze)) : 8;
        const pid_t self = ::getpid();
        if (::fork() == 0) {
          ::sleep(frozen_for);
          ::kill(self, SIGKILL);
          ::_exit(0);
        }
        ::raise(SIGSTOP);
      }
      if (pg.rank() == victim && i == 6) ::raise(SIGKILL);
      all_reduces(pg, 1);
      if (i > 100000) return 1;
    }
  }
  if (scenario == "straggle") {
    const char* who = std::getenv("DDP_TEST_STRAGGLER");
    const int straggler = who != nullptr ? std::atoi(who) : -1;
    for (int step = 0; step < 60; ++step) {
      if (pg.rank() == straggler) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int bucket = 0; bucket < 3; ++bucket) {
        auto t = torch::ones({1000});
        pg.all_reduce(t);
      }
    }
    return -1;
  }
  if (scenario == "dump") {
    for (int i = 1; i <= 60; ++i) {
      // Rank 0 measures the others' clocks beside the training, on store connections of its
      // own; on LibTorch 2.6 that took longer than 29 small all-reduces (1 run in 4 dumped
      // "clock_offset_us": null): the dump is asked for once it has had the time.
      if (i == 30) std::this_thread::sleep_for(std::chrono::seconds(2));
      if (i == 30) ::kill(::getpid(), SIGUSR2);
      all_reduces(pg, 1);
    }
    if (own_usr2_handled != 0) {
      std::cout << "own SIGUSR2 handler ran" << std::endl;
      return -1;
    }
    const char* dir = std::getenv("DTLAUNCH_DDP_TRACE_DIR");
    for (int waited = 0; waited < 100; ++waited) {
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (name.find(".rank-" + std::to_string(pg.rank()) + ".json") != std::string::npos) {
          std::cout << "dump file: " << name << std::endl;
          return -1;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cout << "FAIL: no dump file" << std::endl;
    return 1;
  }
  if (scenario == "check-shape" || scenario == "check-op") {
    all_reduces(pg, 2);
    auto t = torch::ones({pg.rank() == 1 && scenario == "check-shape" ? 5 : 4});
    if (pg.rank() == 1 && scenario == "check-op")
      pg.all_gather(t);
    else
      pg.all_reduce(t);
    std::cout << "FAIL: the mismatched collective returned" << std::endl;
    return 1;
  }
  return -1;
}

// The line of /proc/self/maps that maps the shm all_reduce's segment, from its path on.
std::string shm_segment_mapping() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto at = line.find("/dev/shm/dtlaunch-ddp-");
    if (at != std::string::npos) return line.substr(at);
  }
  return "none";
}

// Values that every dtype here holds exactly, with exact sums over a few ranks (halves below
// 2^12), so that any two correct reductions agree bit for bit, whatever their order.
torch::Tensor exact_random(int64_t n, torch::ScalarType type, uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randint(-4096, 4096, {n}, torch::kDouble) * 0.5).to(type);
}

void shm_vs_gloo(ddp::ProcessGroup& pg, ddp::ProcessGroup& gloo) {
  int checks = 0;
  // 2621441: 10 MiB and one element of float32, 11 chunks (21 of float64), the last of one
  // element; across nodes, 3 parts a slice (6 of float64).
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}, int64_t{2621441}}) {
    for (auto type : {torch::kFloat, torch::kDouble}) {
      for (auto op :
           {ddp::ReduceOp::kSum, ddp::ReduceOp::kAvg, ddp::ReduceOp::kMin, ddp::ReduceOp::kMax}) {
        const uint64_t seed =
            1000 + static_cast<uint64_t>(pg.rank()) * 7 + static_cast<uint64_t>(n);
        const auto input = exact_random(n, type, seed);
        auto mine = input.clone();
        auto reference = input.clone();
        pg.all_reduce(mine, op);
        gloo.all_reduce(reference, op);
        const std::string what = "all_reduce " + std::string(ddp::to_string(op)) + " " +
                                 c10::toString(type) + " [" + std::to_string(n) + "]";
        check(torch::equal(mine, reference), what + " equals Gloo's");
        // Not vacuous: the inputs differ between ranks, so the result differs from this input
        // (min and max of one element may equal it).
        check(!torch::equal(mine, input) || n == 1, what + " changed the tensor");
        ++checks;
      }
    }
  }
  std::cout << "shm-vs-gloo rank " << pg.rank() << " of " << pg.size() << ": " << checks
            << " checks, " << failures << " failed" << std::endl;
}

void shm_stream(ddp::ProcessGroup& pg) {
  const int ws = pg.size(), me = pg.rank();
  const int64_t triangle = ws * (ws + 1) / 2;
  constexpr int kCount = 500;
  std::vector<torch::Tensor> ts;
  std::vector<std::shared_ptr<ddp::Work>> works;
  auto pattern = [](int64_t n, torch::ScalarType type) {
    return torch::fmod(torch::arange(n, torch::kDouble), 13).to(type);
  };
  for (int i = 0; i < kCount; ++i) {
    // Mostly small, some over one slot (1 MiB): chunk boundaries inside the stream.
    const int64_t n = i % 50 == 49 ? 600001 : (int64_t{i} * 7919) % 20000 + 1;
    const auto type = i % 3 == 2 ? torch::kDouble : i % 17 == 5 ? torch::kLong : torch::kFloat;
    ts.push_back(pattern(n, type) * (me + 1) + i % 5);
    works.push_back(pg.all_reduce_async(ts.back(), ddp::ReduceOp::kSum));
    if (i % 100 == 50) {  // a Gloo collective while all_reduces are in flight
      auto b = torch::full({3}, static_cast<double>(me + i));
      pg.broadcast(b, 1 % ws);
      check(torch::equal(b, torch::full({3}, static_cast<double>(1 % ws + i))), "broadcast");
    }
  }
  for (int i = kCount - 1; i >= 0; --i) works[static_cast<size_t>(i)]->wait();
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) {
    const auto& t = ts[static_cast<size_t>(i)];
    auto expected = pattern(t.numel(), t.scalar_type()) * triangle + ws * (i % 5);
    if (!torch::equal(t, expected)) {
      ++wrong;
      check(false, "stream all_reduce " + std::to_string(i) + " [" + std::to_string(t.numel()) +
                       "] " + c10::toString(t.scalar_type()));
    }
  }
  std::cout << "shm-stream rank " << me << ": " << kCount << " all_reduces, " << wrong << " wrong"
            << std::endl;
}

int nccl_init_lost() {
  const int rank = std::atoi(std::getenv("RANK"));
  ddp::InitOptions o;
  o.backend = rank == 0 ? ddp::Backend::kNccl : ddp::Backend::kGloo;
  o.timeout = std::chrono::seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ddp::init_process_group(o);
  } catch (const ddp::Error& e) {
    const std::string msg = e.what();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "rank " << rank << " " << ddp::to_string(e.kind()) << " after " << s
              << " s: " << msg.substr(0, msg.find('\n')) << std::endl;
    if (rank != 0) return 0;  // Gloo without its peer: expected to fail too
    check(e.kind() == ddp::ErrorKind::kTimeout, "NCCL init: kTimeout");
    check(msg.find("NCCL init timed out") != std::string::npos &&
              msg.find("ranks 1 never joined") != std::string::npos,
          "NCCL init names rank 1 as never joined");
    check(s < 10.0 + 5.0, "NCCL init bounded by the timeout");
    std::cout << "nccl-init-lost: 1 checks, " << failures << " failed" << std::endl;
    return failures == 0 ? 0 : 1;
  }
  std::cout << "FAIL: rank " << rank << " init returned without its peer" << std::endl;
  return rank == 0 ? 1 : 0;
}

}  // namespace

// DDP_TEST_NODES=N0,N1,...: this rank (RANK) declares itself on node N_RANK of max+1 (NODE_RANK,
// NNODES), as dtlaunch tells a node's ranks apart, so that one machine can hold the ranks of
// several nodes (the hierarchical all_reduce's tests).
void nodes_if_asked() {
  const char* nodes = std::getenv("DDP_TEST_NODES");
  if (!nodes || !std::getenv("RANK")) return;
  std::vector<int> node_of;
  std::stringstream list(nodes);
  for (std::string n; std::getline(list, n, ',');) node_of.push_back(std::stoi(n));
  const int rank = std::atoi(std::getenv("RANK"));
  if (rank < 0 || rank >= static_cast<int>(node_of.size())) return;
  ::setenv("NODE_RANK", std::to_string(node_of[static_cast<size_t>(rank)]).c_str(), 1);
  ::setenv("NNODES", std::to_string(*std::max_element(node_of.begin(), node_of.end()) + 1).c_str(),
           1);
}

// Before any thread exists: unshare(CLONE_NEWNS) refuses a multithreaded process.
void small_shm_if_asked() {
  const char* which = std::getenv("DDP_TEST_SMALL_SHM_RANK");
  if (!which || !std::getenv("RANK") || std::atoi(which) != std::atoi(std::getenv("RANK"))) return;
  // Private propagation first: a mount in a namespace that still shares "/" would cover the
  // machine's /dev/shm too.
  if (::unshare(CLONE_NEWNS) != 0 ||
      ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
    std::cout << "small-shm: not permitted (" << std::strerror(errno) << ")" << std::endl;
    return;
  }
  std::cout << "small-shm: mounted" << std::endl;
}

// DDP_TEST_STARTUP_FAULT=kill|freeze: rank DDP_TEST_VICTIM SIGKILLs or SIGSTOPs itself
// DDP_TEST_FAULT_DELAY_MS after it called init_process_group, from a thread of its own, while
// init is still under way (the test keeps a rank away so that the rendezvous cannot complete).
// A frozen victim is ended DDP_TEST_FREEZE_SECONDS (8) later by a child of its own.
void fault_during_startup_if_asked() {
  const char* fault = std::getenv("DDP_TEST_STARTUP_FAULT");
  if (fault == nullptr ||
      std::atoi(std::getenv("DDP_TEST_VICTIM")) != std::atoi(std::getenv("RANK")))
    return;
  const std::string how = fault;
  const int delay_ms = std::atoi(std::getenv("DDP_TEST_FAULT_DELAY_MS"));
  const char* freeze = std::getenv("DDP_TEST_FREEZE_SECONDS");
  const unsigned frozen_for = freeze != nullptr ? static_cast<unsigned>(std::atoi(freeze)) : 8;
  std::thread([how, delay_ms, frozen_for] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    const pid_t self = ::getpid();
    if (how == "freeze" && ::fork() == 0) {
      ::sleep(frozen_for);
      ::kill(self, SIGKILL);
      ::_exit(0);
    }
    ::kill(self, how == "freeze" ? SIGSTOP : SIGKILL);
  }).detach();
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ddp_worker collectives|train|unused|rendezvous|nccl\n";
    return 2;
  }
  small_shm_if_asked();
  nodes_if_asked();
  if (const char* set = std::getenv("DDP_TEST_RANK_ENV")) {  // "R:NAME=VALUE"
    const std::string spec = set;
    const auto colon = spec.find(':'), equals = spec.find('=');
    if (std::getenv("RANK") && std::stoi(spec.substr(0, colon)) == std::atoi(std::getenv("RANK")))
      ::setenv(spec.substr(colon + 1, equals - colon - 1).c_str(), spec.substr(equals + 1).c_str(),
               1);
  }
  if (std::getenv("DDP_TEST_OWN_USR2") != nullptr) std::signal(SIGUSR2, own_usr2);
  const std::string scenario = argv[1];
  torch::set_num_threads(1);
  const auto started = std::chrono::steady_clock::now();
  if (scenario == "nccl-init-lost") return nccl_init_lost();
  try {
    if (const char* late = std::getenv("DDP_TEST_LATE_RANK"))
      if (std::getenv("RANK") && std::atoi(late) == std::atoi(std::getenv("RANK"))) {
        const char* ms = std::getenv("DDP_TEST_LATE_MS");
        std::this_thread::sleep_for(std::chrono::milliseconds(ms ? std::atoi(ms) : 1500));
      }
    fault_during_startup_if_asked();
    auto pg = init(scenario == "nccl" ? ddp::Backend::kNccl : ddp::Backend::kGloo);
    std::cout << "shm-segment: " << shm_segment_mapping() << std::endl;
    if (scenario == "collectives") {
      collectives(*pg, torch::kCPU);
    } else if (scenario == "train") {
      train(pg, torch::kCPU);
    } else if (scenario == "nccl") {
      // CPU tensors go through device memory; CUDA tensors exist only with a CUDA LibTorch.
      collectives(*pg, torch::kCPU);
      if (torch::cuda::is_available()) {
        collectives(*pg, pg->device());
        train(pg, pg->device());
      } else {
        train(pg, torch::kCPU);
      }
    } else if (scenario == "unused") {
      unused(pg);
    } else if (scenario == "peer-exit") {
      if (pg->rank() != 0) return 0;
      auto t = torch::ones({1000});
      pg->all_reduce(t);  // must throw: the peers are gone or going
      std::cout << "FAIL: all_reduce without peers returned" << std::endl;
      return 1;
    } else if (int status = diagnostics(scenario, *pg); status >= 0) {
      return status;
    } else if (scenario == "shm-vs-gloo") {
      ddp::WorkerEnv env = pg->env();
      env.master_port = std::atoi(std::getenv("DDP_TEST_PORT2"));
      ddp::InitOptions o;
      o.backend = ddp::Backend::kGloo;
      o.timeout = timeout_from_env();
      o.shm_all_reduce = false;
      auto gloo = ddp::init_process_group(env, o);
      shm_vs_gloo(*pg, *gloo);
      gloo->barrier();
    } else if (scenario == "shm-stream") {
      shm_stream(*pg);
    } else if (scenario == "shm-mismatch") {
      all_reduces(*pg, 2);
      auto t = torch::ones({pg->rank() == 1 ? 5 : 4});
      pg->all_reduce(t);
      std::cout << "FAIL: the mismatched all_reduce returned" << std::endl;
      return 1;
    } else if (scenario == "straggle" || scenario == "dump") {
      // Run by diagnostics(), which returned -1 for the closing barrier.
    } else if (scenario == "quiet") {
      // No false alarm: rank 1 computes without any collective, rank 0 writes a slow checkpoint
      // (fsync after every MiB), while the others wait in a collective for both.
      all_reduces(*pg, 2);
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::seconds(std::atoi(std::getenv("DDP_TEST_QUIET_SECONDS")));
      if (pg->rank() == 1) {
        auto a = torch::rand({256, 256});
        while (std::chrono::steady_clock::now() < until) a = torch::tanh(a.mm(a));
      } else if (pg->rank() == 0) {
        const std::string path = std::getenv("DDP_TEST_CHECKPOINT");
        std::vector<char> mib(1 << 20, 'x');
        FILE* f = std::fopen(path.c_str(), "w");
        while (f != nullptr && std::chrono::steady_clock::now() < until) {
          std::fwrite(mib.data(), 1, mib.size(), f);
          std::fflush(f);
          ::fsync(::fileno(f));
          std::fseek(f, 0, SEEK_SET);
        }
        if (f != nullptr) std::fclose(f);
      }
      all_reduces(*pg, 2);
      std::cout << "quiet ok rank " << pg->rank() << std::endl;
    } else if (scenario == "late") {
      std::cout << "late ok rank " << pg->rank() << std::endl;
    } else if (scenario == "rendezvous") {
      std::cout << "rendezvous ok rank " << pg->rank() << std::endl;
    } else {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 2;
    }
    pg->barrier();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::cout << "ERROR: " << msg.substr(0, msg.find('\n')) << std::endl;
    std::cout << "error-kind: " << kind_name(e) << std::endl;
    // From the call into the runtime, so that process start-up under load does not count.
    std::cout << "error-after-seconds: "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
              << std::endl;
    return 3;
  }
  return failures == 0 ? 0 : 1;
}
