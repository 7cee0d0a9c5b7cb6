// The training loop of dtlaunch-train: data, DDP, evaluation across ranks, checkpoints and the
// agreed stop at a step boundary. The one translation unit that includes <torch/torch.h>
// (through model.hpp): it costs about 17 s and 1 GB to compile.
#include <dtlaunch/ddp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "checkpoint.hpp"
#include "config.hpp"
#include "error.hpp"
#include "dataset_cache.hpp"
#include "model.hpp"
#include "stop_signal.hpp"

namespace dtlaunch::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace ddp = dtlaunch::ddp;

// Fashion-MNIST's training-set mean and standard deviation of the pixel values in [0, 1].
constexpr double kPixelMean = 0.2860;
constexpr double kPixelStd = 0.3530;

struct Split {
  at::Tensor images;  // [N, 1, 28, 28] float, normalised
  at::Tensor labels;  // [N] long
  std::int64_t size() const { return images.size(0); }
};

struct Data {
  Split train;
  Split test;  // empty in synthetic mode
};

class Rank0Log {
 public:
  explicit Rank0Log(int rank) : on_(rank == 0) {}
  __attribute__((format(printf, 2, 3))) void operator()(const char* fmt, ...) const {
    if (!on_) return;
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stdout, fmt, ap);
    va_end(ap);
    std::fputc('\n', stdout);
    // Progress goes to a pipe under a launcher; without the flush it arrives in 4 KiB lumps.
    std::fflush(stdout);
  }

 private:
  bool on_;
};

ddp::Backend parse_backend(const std::string& name) {
  if (name == "gloo") return ddp::Backend::kGloo;
  if (name == "nccl") return ddp::Backend::kNccl;
  if (name == "auto") return ddp::Backend::kAuto;
  throw Error::usage("--backend " + name + ": expected gloo, nccl or auto");
}

Split load_mnist_split(const std::filesystem::path& dir, bool train) {
  using torch::data::datasets::MNIST;
  MNIST ds(dir.string(), train ? MNIST::Mode::kTrain : MNIST::Mode::kTest);
  return Split{ds.images().sub(kPixelMean).div_(kPixelStd), ds.targets()};
}

// Local rank 0 of each node unpacks the dataset while the others wait at a barrier; they then
// find the files in place (on another node, its own local rank 0 did the same).
// A failure there (a corrupt file, a full cache) is agreed on by all ranks, in place of a
// barrier: every rank then fails with the same exit status instead of the others failing first
// with "Connection reset by peer" when the failing rank leaves.
Data load_fashion_mnist(const TrainConfig& cfg, ddp::ProcessGroup& pg) {
  std::filesystem::path dir;
  int status = 0;
  std::string error;
  if (pg.env().local_rank == 0) {
    try {
      dir = prepare_fashion_mnist(cfg.data_dir, cfg.cache_dir);
    } catch (const Error& e) {
      status = e.exit_status();
      error = e.what();
    } catch (const std::exception& e) {
      status = static_cast<int>(ExitCode::kFailure);
      error = e.what();
    }
  }
  at::Tensor worst = at::tensor({static_cast<float>(status)});
  pg.all_reduce(worst, ddp::ReduceOp::kMax);
  const int agreed = static_cast<int>(worst.item<float>());
  const ExitCode code = agreed == 2 ? ExitCode::kBadInput : ExitCode::kFailure;
  if (status != 0) throw Error(code, error.substr(0, error.find('\n')));
  if (agreed != 0)
    throw Error(code, "rank " + std::to_string(pg.rank()) +
                          ": the dataset could not be prepared (see the error of the local rank 0 "
                          "that failed)");
  if (pg.env().local_rank != 0) dir = prepare_fashion_mnist(cfg.data_dir, cfg.cache_dir);
  return Data{load_mnist_split(dir, true), load_mnist_split(dir, false)};
}

// Benchmark data: the same recipe as bench/ddp/torch_ddp.py, different on each rank.
Data make_synthetic(const TrainConfig& cfg, int rank) {
  auto gen = at::detail::createCPUGenerator(cfg.seed + static_cast<std::uint64_t>(rank));
  auto n = static_cast<std::int64_t>(cfg.synthetic);
  at::Tensor images = at::randn({n, 1, 28, 28}, gen);
  at::Tensor labels = at::randint(10, {n}, gen, at::kLong);
  return Data{Split{images, labels}, Split{}};
}

// This rank's training samples of one epoch, in order: the DistributedSampler's shard of
// Fashion-MNIST, or the whole local synthetic set.
at::Tensor epoch_order(ddp::DistributedSampler* sampler, std::int64_t local_size) {
  if (sampler == nullptr) return at::arange(local_size, at::kLong);
  std::vector<size_t> idx = sampler->indices();
  std::vector<std::int64_t> as_long(idx.begin(), idx.end());
  return at::tensor(as_long, at::kLong);
}

// Test accuracy over the whole test set: rank r takes samples r, r+W, r+2W, ... (no padding,
// so nothing is counted twice) and the counts are summed across ranks.
double evaluate(FashionCnn& net, const Split& test, ddp::ProcessGroup& pg,
                std::int64_t* correct_out, std::int64_t* total_out) {
  torch::NoGradGuard no_grad;
  net->eval();
  at::Tensor mine = at::arange(pg.rank(), test.size(), pg.size(), at::kLong);
  std::int64_t correct = 0;
  constexpr std::int64_t kChunk = 1000;
  for (std::int64_t b = 0; b < mine.size(0); b += kChunk) {
    at::Tensor idx = mine.slice(0, b, std::min(b + kChunk, mine.size(0)));
    at::Tensor pred = net->forward(test.images.index_select(0, idx)).argmax(1);
    correct += pred.eq(test.labels.index_select(0, idx)).sum().item<std::int64_t>();
  }
  net->train();
  at::Tensor counts =
      at::tensor({static_cast<double>(correct), static_cast<double>(mine.size(0))}, at::kDouble);
  pg.all_reduce(counts, ddp::ReduceOp::kSum);
  *correct_out = static_cast<std::int64_t>(counts[0].item<double>());
  *total_out = static_cast<std::int64_t>(counts[1].item<double>());
  return counts[0].item<double>() / counts[1].item<double>();
}

// Rank 0 writes the checkpoint; its success or failure is then broadcast, which also keeps the
// other ranks from exiting (and a launcher from tearing the job down) before the file is in
// place.
void save_on_rank0(const std::string& path, FashionCnn& net, torch::optim::Optimizer& opt,
                   const Progress& progress, ddp::ProcessGroup& pg) {
  std::string error;
  if (pg.rank() == 0) {
    try {
      save_checkpoint(path, *net, opt, progress);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  at::Tensor ok = at::tensor({error.empty() ? 1.0f : 0.0f});
  pg.broadcast(ok, 0);
  if (ok.item<float>() == 0.0f) {
    if (pg.rank() == 0) throw Error(ExitCode::kFailure, error);
    throw Error(ExitCode::kFailure, "rank 0 could not write the checkpoint " + path);
  }
}

// Every rank must see the same file, or the ranks would start from different places.
std::optional<Progress> maybe_resume(const TrainConfig& cfg, FashionCnn& net,
                                     torch::optim::Optimizer& opt, ddp::ProcessGroup& pg) {
  if (!cfg.resume) return std::nullopt;
  bool here = std::filesystem::exists(cfg.checkpoint);
  at::Tensor seen = at::tensor({here ? 1.0f : 0.0f});
  pg.all_reduce(seen, ddp::ReduceOp::kSum);
  auto ranks_seeing = static_cast<int>(seen.item<float>());
  if (ranks_seeing == 0) return std::nullopt;
  if (ranks_seeing != pg.size())
    throw Error(ExitCode::kBadInput, "--checkpoint " + cfg.checkpoint + " exists on " +
                                         std::to_string(ranks_seeing) + " of " +
                                         std::to_string(pg.size()) +
                                         " ranks: it must be on a file system every rank shares");
  Progress p = load_checkpoint(cfg.checkpoint, *net, opt);
  if (p.world_size != static_cast<std::uint64_t>(pg.size()) || p.batch_size != cfg.batch_size ||
      p.seed != cfg.seed)
    throw Error(ExitCode::kBadInput, cfg.checkpoint + ": written by a run with " +
                                         std::to_string(p.world_size) + " ranks, --batch-size " +
                                         std::to_string(p.batch_size) + ", --seed " +
                                         std::to_string(p.seed) + "; resume with the same values");
  return p;
}

}  // namespace

int run_training(const TrainConfig& cfg) {
  const auto run_start = Clock::now();
  at::set_num_threads(cfg.threads);

  // Bad input is found by every rank before any communication (preflight.hpp).
  if (cfg.synthetic == 0) check_fashion_mnist(cfg.data_dir);

  ddp::InitOptions init;
  init.backend = parse_backend(cfg.backend);
  init.rendezvous_timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::llround(cfg.rendezvous_timeout_s * 1000.0)));
  std::shared_ptr<ddp::ProcessGroup> pg = ddp::init_process_group(init);
  end_startup();
  const int rank = pg->rank();
  const int world = pg->size();
  Rank0Log log(rank);

  const bool synthetic = cfg.synthetic > 0;
  Data data = synthetic ? make_synthetic(cfg, rank) : load_fashion_mnist(cfg, *pg);

  // Same seed everywhere: the ranks start identical even before DDP broadcasts rank 0's weights.
  torch::manual_seed(cfg.seed);
  FashionCnn net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum));

  Progress start;
  if (auto resumed = maybe_resume(cfg, net, opt, *pg)) {
    start = *resumed;
    log("resumed from %s at epoch %llu step %llu (global step %llu)", cfg.checkpoint.c_str(),
        static_cast<unsigned long long>(start.epoch + 1),
        static_cast<unsigned long long>(start.step_in_epoch),
        static_cast<unsigned long long>(start.global_step));
  } else if (cfg.resume) {
    log("no checkpoint at %s: starting from scratch", cfg.checkpoint.c_str());
  }
  start.world_size = static_cast<std::uint64_t>(world);
  start.batch_size = cfg.batch_size;
  start.seed = cfg.seed;

  ddp::DdpOptions dopts;
  // At least a byte: a tiny positive --bucket-cap-mb means one bucket per gradient.
  dopts.bucket_cap_bytes =
      std::max<size_t>(1, static_cast<size_t>(cfg.bucket_cap_mb * 1024 * 1024));
  ddp::DistributedDataParallel ddp_model(net.ptr(), pg, dopts);

  std::optional<ddp::DistributedSampler> sampler;
  if (!synthetic)
    sampler.emplace(static_cast<size_t>(data.train.size()), world, rank, /*shuffle=*/true, cfg.seed,
                    /*drop_last=*/false);
  const std::int64_t local_samples =
      sampler ? static_cast<std::int64_t>(sampler->num_samples()) : data.train.size();
  const auto batch = static_cast<std::int64_t>(cfg.batch_size);
  const std::uint64_t steps_per_epoch =
      static_cast<std::uint64_t>((local_samples + batch - 1) / batch);

  log("dtlaunch-train: %d rank(s), backend %s, %d thread(s) per rank, batch %lld per rank, "
      "%llu epoch(s) of %llu steps%s, %s",
      world, ddp::to_string(pg->backend()), cfg.threads, static_cast<long long>(batch),
      static_cast<unsigned long long>(cfg.epochs), static_cast<unsigned long long>(steps_per_epoch),
      cfg.max_steps ? (", at most " + std::to_string(cfg.max_steps) + " steps").c_str() : "",
      synthetic ? "synthetic data" : "Fashion-MNIST");

  Progress now = start;
  double last_accuracy = -1;
  std::int64_t last_correct = 0, last_total = 0;
  // Progress-line accumulators.
  double loss_sum = 0;
  std::uint64_t loss_count = 0;
  auto interval_start = Clock::now();
  // Benchmark timing: from the end of the warm-up steps of this run to the end of the loop.
  std::uint64_t timed_from_step = now.global_step + cfg.warmup_steps;
  Clock::time_point timed_start{};
  bool stopped = false;
  int stop_status = 0;

  auto cap_reached = [&] { return cfg.max_steps != 0 && now.global_step >= cfg.max_steps; };

  for (; now.epoch < cfg.epochs && !cap_reached(); ++now.epoch, now.step_in_epoch = 0) {
    if (sampler) sampler->set_epoch(now.epoch);
    at::Tensor order = epoch_order(sampler ? &*sampler : nullptr, local_samples);

    for (; now.step_in_epoch < steps_per_epoch && !cap_reached(); ++now.step_in_epoch) {
      if (cfg.stop_check_every != 0 && now.global_step % cfg.stop_check_every == 0) {
        // The agreed stop: a tiny all-reduce(max) of each rank's flag, at the same step on
        // every rank, so either all ranks stop here or none does.
        at::Tensor flag = at::tensor({static_cast<float>(stop_signal_received())});
        pg->all_reduce(flag, ddp::ReduceOp::kMax);
        if (flag.item<float>() > 0) {
          int sig = static_cast<int>(flag.item<float>());
          if (!cfg.checkpoint.empty()) {
            save_on_rank0(cfg.checkpoint, net, opt, now, *pg);
            log("stop: %s received; checkpoint %s saved at epoch %llu step %llu (global step "
                "%llu); exiting with status %d",
                strsignal(sig), cfg.checkpoint.c_str(),
                static_cast<unsigned long long>(now.epoch + 1),
                static_cast<unsigned long long>(now.step_in_epoch),
                static_cast<unsigned long long>(now.global_step), kExitCheckpointed);
          } else {
            pg->barrier();
            log("stop: %s received at global step %llu; no --checkpoint given, nothing saved; "
                "exiting with status %d",
                strsignal(sig), static_cast<unsigned long long>(now.global_step),
                kExitCheckpointed);
          }
          stopped = true;
          stop_status = kExitCheckpointed;
          break;
        }
      }
      if (now.global_step == timed_from_step) {
        ddp_model.reset_stats();
        timed_start = Clock::now();
      }

      const auto first = static_cast<std::int64_t>(now.step_in_epoch) * batch;
      at::Tensor idx = order.slice(0, first, std::min(first + batch, local_samples));
      at::Tensor x = data.train.images.index_select(0, idx);
      at::Tensor y = data.train.labels.index_select(0, idx);

      opt.zero_grad();
      at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
      loss.backward();  // DDP averages the gradients across ranks during and after backward
      opt.step();
      ++now.global_step;

      loss_sum += loss.item<double>();
      ++loss_count;
      if (cfg.log_every != 0 && now.global_step % cfg.log_every == 0) {
        at::Tensor l = at::tensor({loss_sum, static_cast<double>(loss_count)}, at::kDouble);
        pg->all_reduce(l, ddp::ReduceOp::kSum);
        double secs = std::chrono::duration<double>(Clock::now() - interval_start).count();
        log("epoch %llu/%llu step %llu/%llu loss %.4f samples/s %.0f",
            static_cast<unsigned long long>(now.epoch + 1),
            static_cast<unsigned long long>(cfg.epochs),
            static_cast<unsigned long long>(now.step_in_epoch + 1),
            static_cast<unsigned long long>(steps_per_epoch),
            l[0].item<double>() / l[1].item<double>(),
            static_cast<double>(loss_count) * static_cast<double>(batch * world) / secs);
        loss_sum = 0;
        loss_count = 0;
        interval_start = Clock::now();
      }
    }
    if (stopped) break;

    const bool epoch_done = now.step_in_epoch == steps_per_epoch;
    if (!synthetic && (epoch_done || cap_reached())) {
      last_accuracy = evaluate(net, data.test, *pg, &last_correct, &last_total);
      log("epoch %llu/%llu%s test accuracy %.4f (%lld/%lld)",
          static_cast<unsigned long long>(now.epoch + 1),
          static_cast<unsigned long long>(cfg.epochs), epoch_done ? "" : " (step cap)",
          last_accuracy, static_cast<long long>(last_correct), static_cast<long long>(last_total));
    }
    if (!cfg.checkpoint.empty()) {
      Progress next = now;
      if (epoch_done) {
        ++next.epoch;
        next.step_in_epoch = 0;
      }
      save_on_rank0(cfg.checkpoint, net, opt, next, *pg);
    }
    if (!epoch_done) break;  // the step cap ended training inside this epoch
  }

  if (synthetic && timed_start != Clock::time_point{} && now.global_step > timed_from_step) {
    double secs = std::chrono::duration<double>(Clock::now() - timed_start).count();
    auto steps = static_cast<double>(now.global_step - timed_from_step);
    ddp::DdpStats st = ddp_model.stats();
    log("timing: steps %.0f ms/step %.3f allreduce_ms/step %.3f hidden_ms/step %.3f "
        "hidden_share %.3f buckets %zu",
        steps, 1e3 * secs / steps, 1e3 * st.allreduce_seconds / steps,
        1e3 * st.hidden_seconds / steps,
        st.allreduce_seconds > 0 ? st.hidden_seconds / st.allreduce_seconds : 0.0,
        ddp_model.buckets().size());
  }
  if (stopped) return stop_status;
  if (!synthetic && last_accuracy < 0)  // resumed from a finished run: report its accuracy
    last_accuracy = evaluate(net, data.test, *pg, &last_correct, &last_total);

  double wall = std::chrono::duration<double>(Clock::now() - run_start).count();
  if (last_accuracy >= 0)
    log("done: %llu steps, test accuracy %.4f (%lld/%lld), %.1f s",
        static_cast<unsigned long long>(now.global_step), last_accuracy,
        static_cast<long long>(last_correct), static_cast<long long>(last_total), wall);
  else
    log("done: %llu steps, %.1f s", static_cast<unsigned long long>(now.global_step), wall);
  return 0;
}

}  // namespace dtlaunch::train
