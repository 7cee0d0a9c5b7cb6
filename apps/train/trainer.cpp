// The training loop of dtlaunch-train: data, DDP, evaluation across ranks, checkpoints and the
// agreed stop at a step boundary. The one translation unit that includes <torch/torch.h>
// (through model.hpp): it costs about 17 s and 1 GB to compile.
#include <dtlaunch/ddp.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint.hpp"
#include "checkpoint_file.hpp"
#include "config.hpp"
#include "dataset_cache.hpp"
#include "error.hpp"
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
Data load_fashion_mnist(const TrainConfig& cfg, ddp::ProcessGroup& pg, bool replacement) {
  if (replacement) {
    // A live replacement joins ranks that are long past this agreement: it unpacks on its own.
    const std::filesystem::path dir = prepare_fashion_mnist(cfg.data_dir, cfg.cache_dir);
    return Data{load_mnist_split(dir, true), load_mnist_split(dir, false)};
  }
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

struct Accuracy {
  double value = -1;  // -1: not measured in this run
  std::int64_t correct = 0;
  std::int64_t total = 0;
  bool known() const { return value >= 0; }
};

// Test accuracy over the whole test set: rank r takes samples r, r+W, r+2W, ... (no padding,
// so nothing is counted twice) and the counts are summed across ranks.
Accuracy evaluate(FashionCnn& net, const Split& test, ddp::ProcessGroup& pg) {
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
  return Accuracy{counts[0].item<double>() / counts[1].item<double>(),
                  static_cast<std::int64_t>(counts[0].item<double>()),
                  static_cast<std::int64_t>(counts[1].item<double>())};
}

// The network and its optimizer. The same seed on every rank: the ranks start identical even
// before DDP broadcasts rank 0's weights.
struct Model {
  explicit Model(const TrainConfig& cfg)
      : net(seeded(cfg.seed)),
        opt(net->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum)) {}

  FashionCnn net;
  torch::optim::SGD opt;

 private:
  static FashionCnn seeded(std::uint64_t seed) {
    torch::manual_seed(seed);
    return FashionCnn();
  }
};

// Rank 0 writes the checkpoint; its success or failure is then broadcast, which also keeps the
// other ranks from exiting (and a launcher from tearing the job down) before the file is in
// place.
void save_on_rank0(const std::string& path, Model& model, const Progress& progress,
                   ddp::ProcessGroup& pg) {
  std::string error;
  if (pg.rank() == 0) {
    try {
      save_checkpoint(path, *model.net, model.opt, progress);
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

SampleOrder sample_order(const TrainConfig& cfg, const ddp::ProcessGroup& pg) {
  return {static_cast<std::uint64_t>(pg.size()), cfg.batch_size, cfg.seed};
}

// How many ranks see `path` (lstat: a dangling symbolic link is there too, and is refused by the
// load, not ignored).
int ranks_seeing(const std::string& path, ddp::ProcessGroup& pg) {
  struct stat st {};
  at::Tensor seen = at::tensor({::lstat(path.c_str(), &st) == 0 ? 1.0f : 0.0f});
  pg.all_reduce(seen, ddp::ReduceOp::kSum);
  return static_cast<int>(seen.item<float>());
}

// Every rank must see the same file, or the ranks would start from different places. Seen by
// some ranks only, it is looked at again: a file that another process created in between (a
// second job given the same --checkpoint) is not a file system that some ranks lack.
void check_seen_by_all(const std::string& path, int seeing, ddp::ProcessGroup& pg) {
  if (seeing == pg.size()) return;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int again = ranks_seeing(path, pg);
  const std::string where = "--checkpoint " + path + " exists on " + std::to_string(seeing) +
                            " of " + std::to_string(pg.size()) + " ranks";
  if (again == pg.size())
    throw Error(ExitCode::kBadInput,
                where +
                    ", and on every rank a second later: it appeared while this job was "
                    "starting. Is another job writing the same --checkpoint? Give each job "
                    "its own path");
  throw Error(ExitCode::kBadInput, where + ": it must be on a file system every rank shares");
}

// Loads `path` on every rank; the status the worst rank got (0 loaded, 2 bad input, 1 other),
// agreed by all, and this rank's own error.
std::pair<int, std::string> load_everywhere(const std::string& path, Model& model,
                                            ddp::ProcessGroup& pg, const RunShape& shape,
                                            Progress& progress) {
  int status = 0;
  std::string error;
  try {
    progress = load_checkpoint(path, *model.net, model.opt, shape);
  } catch (const Error& e) {
    status = e.exit_status();
    error = e.what();
  }
  at::Tensor worst = at::tensor({static_cast<float>(status)});
  pg.all_reduce(worst, ddp::ReduceOp::kMax);
  return {static_cast<int>(worst.item<float>()), error};
}

// The newest checkpoint, or, when it fails its check on any rank (a corrupt file), the previous
// one that save_checkpoint kept (checkpoint_file.hpp), on every rank alike, said in one line.
std::optional<Progress> maybe_resume(const TrainConfig& cfg, Model& model, ddp::ProcessGroup& pg,
                                     std::uint64_t steps_per_epoch, const Rank0Log& log) {
  if (!cfg.resume) return std::nullopt;
  const int seeing = ranks_seeing(cfg.checkpoint, pg);
  if (seeing == 0) return std::nullopt;
  check_seen_by_all(cfg.checkpoint, seeing, pg);
  const RunShape shape{sample_order(cfg, pg), cfg.epochs, steps_per_epoch};
  Progress progress;
  const auto [newest, newest_error] = load_everywhere(cfg.checkpoint, model, pg, shape, progress);
  if (newest == 0) return progress;
  const auto fail = [&, newest = newest, newest_error = newest_error](const std::string& more) {
    const ExitCode code = newest == 2 ? ExitCode::kBadInput : ExitCode::kFailure;
    if (!newest_error.empty()) throw Error(code, newest_error + more);
    throw Error(code, "rank " + std::to_string(pg.rank()) + ": --checkpoint " + cfg.checkpoint +
                          " failed its check on another rank (see that rank's error)" + more);
  };
  const std::string prev = previous_checkpoint(cfg.checkpoint);
  if (ranks_seeing(prev, pg) != pg.size()) fail("");
  const auto [previous, previous_error] = load_everywhere(prev, model, pg, shape, progress);
  if (previous != 0)
    fail("; the previous checkpoint " + prev + " did not load either" +
         (previous_error.empty() ? std::string() : " (" + previous_error + ")"));
  log("%s; resuming from the previous checkpoint %s instead",
      newest_error.empty()
          ? ("--checkpoint " + cfg.checkpoint + " failed its check on a rank").c_str()
          : newest_error.c_str(),
      prev.c_str());
  return progress;
}

// Where this run starts: the checkpoint's progress with --resume when there is one, else step
// 0; stamped with this run's shape, which the next checkpoint records.
Progress starting_point(const TrainConfig& cfg, Model& model, ddp::ProcessGroup& pg,
                        std::uint64_t steps_per_epoch, const Rank0Log& log) {
  Progress start;
  if (auto resumed = maybe_resume(cfg, model, pg, steps_per_epoch, log)) {
    start = *resumed;
    log("resumed from %s at epoch %llu step %llu (global step %llu)", cfg.checkpoint.c_str(),
        static_cast<unsigned long long>(start.epoch + 1),
        static_cast<unsigned long long>(start.step_in_epoch),
        static_cast<unsigned long long>(start.global_step));
  } else if (cfg.resume) {
    log("no checkpoint at %s: starting from scratch", cfg.checkpoint.c_str());
  }
  start.order = sample_order(cfg, pg);
  return start;
}

ddp::InitOptions init_options(const TrainConfig& cfg) {
  ddp::InitOptions init;
  init.backend = parse_backend(cfg.backend);
  init.rendezvous_timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::llround(cfg.rendezvous_timeout_s * 1000.0)));
  return init;
}

// What a live replacement gets from a survivor (docs/example.md, "Live recovery"): the weights,
// the optimizer's momentum and where training stands. The sample order follows from the run's
// options, which a replacement has too.
void register_live_state(ddp::TrainingState& state, Model& model, Progress& now) {
  state.add("model", *model.net).add("optimizer", model.opt);
  state.add(
      "progress",
      [&now](torch::serialize::OutputArchive& a) {
        a.write("epoch", c10::IValue(static_cast<std::int64_t>(now.epoch)));
        a.write("step_in_epoch", c10::IValue(static_cast<std::int64_t>(now.step_in_epoch)));
        a.write("global_step", c10::IValue(static_cast<std::int64_t>(now.global_step)));
      },
      [&now](torch::serialize::InputArchive& a) {
        const auto read = [&a](const char* key) {
          c10::IValue v;
          a.read(key, v);
          return static_cast<std::uint64_t>(v.toInt());
        };
        now.epoch = read("epoch");
        now.step_in_epoch = read("step_in_epoch");
        now.global_step = read("global_step");
      });
}

ddp::DdpOptions ddp_options(const TrainConfig& cfg) {
  ddp::DdpOptions options;
  // At least a byte: a tiny positive --bucket-cap-mb means one bucket per gradient.
  options.bucket_cap_bytes =
      std::max<size_t>(1, static_cast<size_t>(cfg.bucket_cap_mb * 1024 * 1024));
  return options;
}

struct Batch {
  at::Tensor images;
  at::Tensor labels;
};

// What this rank trains on: its DistributedSampler shard of Fashion-MNIST, reshuffled each
// epoch, or the whole local synthetic set in order; cut into batches of --batch-size.
class Shard {
 public:
  Shard(const TrainConfig& cfg, const Split& train, const ddp::ProcessGroup& pg)
      : train_(train), batch_(static_cast<std::int64_t>(cfg.batch_size)) {
    if (cfg.synthetic == 0)
      sampler_.emplace(static_cast<size_t>(train.size()), pg.size(), pg.rank(), /*shuffle=*/true,
                       cfg.seed, /*drop_last=*/false);
    samples_ = sampler_ ? static_cast<std::int64_t>(sampler_->num_samples()) : train.size();
  }

  std::uint64_t steps_per_epoch() const {
    return static_cast<std::uint64_t>((samples_ + batch_ - 1) / batch_);
  }
  std::int64_t batch_size() const { return batch_; }

  // The sample indices of one epoch, in this rank's order.
  at::Tensor order(std::uint64_t epoch) {
    if (!sampler_) return at::arange(samples_, at::kLong);
    sampler_->set_epoch(epoch);
    std::vector<size_t> idx = sampler_->indices();
    std::vector<std::int64_t> as_long(idx.begin(), idx.end());
    return at::tensor(as_long, at::kLong);
  }

  Batch batch(const at::Tensor& order, std::uint64_t step_in_epoch) const {
    const auto first = static_cast<std::int64_t>(step_in_epoch) * batch_;
    at::Tensor idx = order.slice(0, first, std::min(first + batch_, samples_));
    return Batch{train_.images.index_select(0, idx), train_.labels.index_select(0, idx)};
  }

 private:
  const Split& train_;
  std::int64_t batch_;
  std::optional<ddp::DistributedSampler> sampler_;
  std::int64_t samples_ = 0;
};

// One optimizer step; returns the batch's loss on this rank.
// `before_update(loss)` runs after backward and before the optimizer's update: the step's last
// communication must come before its update, so that a live recovery can run the step again.
template <typename BeforeUpdate>
double train_step(Model& model, const Batch& batch, BeforeUpdate&& before_update) {
  model.opt.zero_grad();
  at::Tensor loss =
      torch::nn::functional::cross_entropy(model.net->forward(batch.images), batch.labels);
  loss.backward();  // DDP averages the gradients across ranks during and after backward
  const double value = loss.item<double>();
  before_update(value);
  model.opt.step();
  return value;
}

// The agreed stop: every `every` steps a tiny all-reduce(max) of each rank's stop flag, at the
// same step on every rank, so either all ranks stop at that step or none does.
class StopAgreement {
 public:
  StopAgreement(ddp::ProcessGroup& pg, std::uint64_t every) : pg_(pg), every_(every) {}

  // The signal some rank received, agreed on by every rank at this step; 0 to go on.
  int agreed_signal(std::uint64_t global_step) {
    if (every_ == 0 || global_step % every_ != 0) return 0;
    at::Tensor flag = at::tensor({static_cast<float>(stop_signal_received())});
    pg_.all_reduce(flag, ddp::ReduceOp::kMax);
    return static_cast<int>(flag.item<float>());
  }

 private:
  ddp::ProcessGroup& pg_;
  std::uint64_t every_;
};

// After an agreed stop: rank 0 saves the checkpoint of where training stands, or, without
// --checkpoint, the ranks only meet at a barrier, so that none exits before rank 0 has said so.
void stop_here(int sig, const TrainConfig& cfg, Model& model, const Progress& now,
               ddp::ProcessGroup& pg, const Rank0Log& log) {
  if (!cfg.checkpoint.empty()) {
    save_on_rank0(cfg.checkpoint, model, now, pg);
    log("stop: %s received; checkpoint %s saved at epoch %llu step %llu (global step "
        "%llu); exiting with status %d",
        strsignal(sig), cfg.checkpoint.c_str(), static_cast<unsigned long long>(now.epoch + 1),
        static_cast<unsigned long long>(now.step_in_epoch),
        static_cast<unsigned long long>(now.global_step), kExitCheckpointed);
  } else {
    pg.barrier();
    log("stop: %s received at global step %llu; no --checkpoint given, nothing saved; "
        "exiting with status %d",
        strsignal(sig), static_cast<unsigned long long>(now.global_step), kExitCheckpointed);
  }
}

// Rank 0's progress line every --log-every steps: the loss averaged over the steps since the
// last line and over all ranks, and the samples per second of the whole job.
class ProgressLog {
 public:
  ProgressLog(const TrainConfig& cfg, const Shard& shard, ddp::ProcessGroup& pg,
              const Rank0Log& log)
      : cfg_(cfg),
        steps_per_epoch_(shard.steps_per_epoch()),
        samples_per_step_(static_cast<double>(shard.batch_size() * pg.size())),
        pg_(pg),
        log_(log) {}

  // In the step that ends at global step `next` (before its update): the line's all_reduce when
  // the step is due one. Whether it is due follows from the step alone, so every rank makes it,
  // a live replacement too, and a step run again after a live recovery makes it again; nothing
  // of this object changes before the step completes (a replacement's sums start at 0: its line
  // averages what the group counted).
  void reduce_if_due(std::uint64_t next, double loss) {
    if (cfg_.log_every == 0 || next % cfg_.log_every != 0) return;
    at::Tensor l =
        at::tensor({loss_sum_ + loss, static_cast<double>(loss_count_ + 1)}, at::kDouble);
    pg_.all_reduce(l, ddp::ReduceOp::kSum);
    reduced_ = l[0].item<double>() / l[1].item<double>();
  }

  // Called after each completed step, with the progress counting that step.
  void record(const Progress& now, double loss) {
    loss_sum_ += loss;
    ++loss_count_;
    if (!reduced_) return;
    const double secs = std::chrono::duration<double>(Clock::now() - interval_start_).count();
    log_("epoch %llu/%llu step %llu/%llu loss %.4f samples/s %.0f",
         static_cast<unsigned long long>(now.epoch + 1),
         static_cast<unsigned long long>(cfg_.epochs),
         static_cast<unsigned long long>(now.step_in_epoch),
         static_cast<unsigned long long>(steps_per_epoch_), *reduced_,
         static_cast<double>(loss_count_) * samples_per_step_ / secs);
    loss_sum_ = 0;
    loss_count_ = 0;
    interval_start_ = Clock::now();
    reduced_.reset();
  }

 private:
  const TrainConfig& cfg_;
  std::uint64_t steps_per_epoch_;
  double samples_per_step_;
  ddp::ProcessGroup& pg_;
  const Rank0Log& log_;
  double loss_sum_ = 0;
  std::uint64_t loss_count_ = 0;
  Clock::time_point interval_start_ = Clock::now();
  std::optional<double> reduced_;  // this step's line, made in reduce_if_due()
};

// Benchmark timing (--synthetic): from the end of this run's warm-up steps to the end of the
// loop, with the DDP runtime's all-reduce figures over the same steps.
class StepTiming {
 public:
  StepTiming(bool on, std::uint64_t first_timed_step)
      : on_(on), first_timed_step_(first_timed_step) {}

  void before_step(std::uint64_t global_step, ddp::DistributedDataParallel& ddp_model) {
    if (!on_ || global_step != first_timed_step_) return;
    ddp_model.reset_stats();
    start_ = Clock::now();
  }

  void report(std::uint64_t global_step, const ddp::DistributedDataParallel& ddp_model,
              const Rank0Log& log) const {
    if (!on_ || start_ == Clock::time_point{} || global_step <= first_timed_step_) return;
    double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    auto steps = static_cast<double>(global_step - first_timed_step_);
    ddp::DdpStats st = ddp_model.stats();
    log("timing: steps %.0f ms/step %.3f allreduce_ms/step %.3f hidden_ms/step %.3f "
        "hidden_share %.3f buckets %zu",
        steps, 1e3 * secs / steps, 1e3 * st.allreduce_seconds / steps,
        1e3 * st.hidden_seconds / steps,
        st.allreduce_seconds > 0 ? st.hidden_seconds / st.allreduce_seconds : 0.0,
        ddp_model.buckets().size());
  }

 private:
  bool on_;
  std::uint64_t first_timed_step_;
  Clock::time_point start_{};
};

bool step_cap_reached(const TrainConfig& cfg, const Progress& now) {
  return cfg.max_steps != 0 && now.global_step >= cfg.max_steps;
}

void log_start(const TrainConfig& cfg, const ddp::ProcessGroup& pg, const Shard& shard,
               const Rank0Log& log) {
  log("dtlaunch-train: %d rank(s), backend %s, %d thread(s) per rank, batch %lld per rank, "
      "%llu epoch(s) of %llu steps%s, %s",
      pg.size(), ddp::to_string(pg.backend()), cfg.threads,
      static_cast<long long>(shard.batch_size()), static_cast<unsigned long long>(cfg.epochs),
      static_cast<unsigned long long>(shard.steps_per_epoch()),
      cfg.max_steps ? (", at most " + std::to_string(cfg.max_steps) + " steps").c_str() : "",
      cfg.synthetic > 0 ? "synthetic data" : "Fashion-MNIST");
}

// --checkpoint-every, inside the epoch only: its last step is saved at the epoch's end, as the
// start of the next epoch. `now` counts the step just taken.
void save_every_n_steps(const TrainConfig& cfg, Model& model, const Progress& now,
                        std::uint64_t steps_per_epoch, ddp::ProcessGroup& pg) {
  if (cfg.checkpoint_every != 0 && now.global_step % cfg.checkpoint_every == 0 &&
      now.step_in_epoch < steps_per_epoch)
    save_on_rank0(cfg.checkpoint, model, now, pg);
}

// The end of an epoch, or of training inside one at the step cap: the test accuracy (not in
// benchmark mode) and the checkpoint of where a next run starts. Whether the epoch was finished.
bool end_epoch(const TrainConfig& cfg, Model& model, const Data& data, const Progress& now,
               std::uint64_t steps_per_epoch, ddp::ProcessGroup& pg, const Rank0Log& log,
               Accuracy& accuracy) {
  const bool epoch_done = now.step_in_epoch == steps_per_epoch;
  if (cfg.synthetic == 0 && (epoch_done || step_cap_reached(cfg, now))) {
    accuracy = evaluate(model.net, data.test, pg);
    log("epoch %llu/%llu%s test accuracy %.4f (%lld/%lld)",
        static_cast<unsigned long long>(now.epoch + 1), static_cast<unsigned long long>(cfg.epochs),
        epoch_done ? "" : " (step cap)", accuracy.value, static_cast<long long>(accuracy.correct),
        static_cast<long long>(accuracy.total));
  }
  if (!cfg.checkpoint.empty()) {
    // A finished epoch is saved as the start of the next one.
    Progress next = now;
    if (epoch_done) {
      ++next.epoch;
      next.step_in_epoch = 0;
    }
    save_on_rank0(cfg.checkpoint, model, next, pg);
  }
  return epoch_done;
}

void log_done(const Progress& now, const Accuracy& accuracy, Clock::time_point run_start,
              const Rank0Log& log) {
  double wall = std::chrono::duration<double>(Clock::now() - run_start).count();
  if (accuracy.known())
    log("done: %llu steps, test accuracy %.4f (%lld/%lld), %.1f s",
        static_cast<unsigned long long>(now.global_step), accuracy.value,
        static_cast<long long>(accuracy.correct), static_cast<long long>(accuracy.total), wall);
  else
    log("done: %llu steps, %.1f s", static_cast<unsigned long long>(now.global_step), wall);
}

// "weights sha256 HEX" on rank 0, once every rank has found the same digest: DDP keeps the
// replicas equal bit for bit, and a run that ends with another's digest ended with its weights.
void log_weights_digest(const Model& model, ddp::ProcessGroup& pg, const Rank0Log& log) {
  const std::string digest = weights_sha256(*model.net);
  // The digest as 8 words of 32 bits (exact in a double), then negated: one MAX gives every
  // word's largest and smallest value over the ranks.
  at::Tensor words = at::zeros({16}, at::kDouble);
  for (int i = 0; i < 8; ++i) {
    const double word = static_cast<double>(std::stoul(digest.substr(8 * i, 8), nullptr, 16));
    words[i] = word;
    words[8 + i] = -word;
  }
  pg.all_reduce(words, ddp::ReduceOp::kMax);
  if (!at::equal(words.slice(0, 0, 8), -words.slice(0, 8, 16)))
    throw Error(ExitCode::kFailure, "rank " + std::to_string(pg.rank()) + ": weights sha256 " +
                                        digest +
                                        ", and another rank ended with other weights: "
                                        "the replicas diverged");
  log("weights sha256 %s", digest.c_str());
}

}  // namespace

int run_training(const TrainConfig& cfg) {
  const auto run_start = Clock::now();
  at::set_num_threads(cfg.threads);

  // Bad input is found by every rank before any communication (preflight.hpp).
  const bool synthetic = cfg.synthetic > 0;
  if (!synthetic) check_fashion_mnist(cfg.data_dir);

  Model model(cfg);
  Progress now;
  std::int64_t live_step = 0;  // now.global_step, as the live state's step counter
  ddp::TrainingState state(live_step);
  register_live_state(state, model, now);
  // A group that recovers live from a lost rank where the launcher starts replacements
  // (DTLAUNCH_DDP_LIVE=1); a replacement gets `state` from a survivor here.
  ddp::LiveRun live(state, init_options(cfg));
  end_startup();  // from here a stop signal is agreed on at a step boundary (stop_signal.hpp)
  std::shared_ptr<ddp::ProcessGroup> pg = live.group();
  Rank0Log log(pg->rank());
  Data data = synthetic ? make_synthetic(cfg, pg->rank())
                        : load_fashion_mnist(cfg, *pg, live.replacement());
  Shard shard(cfg, data.train, *pg);
  if (live.replacement())
    now.order = sample_order(cfg, *pg);
  else
    now = starting_point(cfg, model, *pg, shard.steps_per_epoch(), log);
  live_step = static_cast<std::int64_t>(now.global_step);
  ddp::DistributedDataParallel ddp_model(model.net.ptr(), pg, ddp_options(cfg));

  log_start(cfg, *pg, shard, log);

  StopAgreement stop(*pg, cfg.stop_check_every);
  ProgressLog progress(cfg, shard, *pg, log);
  StepTiming timing(synthetic, now.global_step + cfg.warmup_steps);
  Accuracy accuracy;

  for (; now.epoch < cfg.epochs && !step_cap_reached(cfg, now);
       ++now.epoch, now.step_in_epoch = 0) {
    at::Tensor order = shard.order(now.epoch);
    while (now.step_in_epoch < shard.steps_per_epoch() && !step_cap_reached(cfg, now)) {
      int sig = 0;
      double loss = 0;
      // Everything of a step that communicates comes before its update, and the counters last:
      // after a live recovery the step runs again from the state the group agreed on.
      const bool done = live.step([&] {
        if ((sig = stop.agreed_signal(now.global_step)) != 0) return;
        timing.before_step(now.global_step, ddp_model);
        loss = train_step(model, shard.batch(order, now.step_in_epoch), [&](double value) {
          progress.reduce_if_due(now.global_step + 1, value);
        });
        ++now.step_in_epoch;
        live_step = static_cast<std::int64_t>(++now.global_step);
      });
      if (sig != 0) {
        stop_here(sig, cfg, model, now, *pg, log);
        timing.report(now.global_step, ddp_model, log);
        return kExitCheckpointed;
      }
      if (!done) {
        order = shard.order(now.epoch);  // the state sent may be of the next epoch
        continue;
      }
      progress.record(now, loss);
      save_every_n_steps(cfg, model, now, shard.steps_per_epoch(), *pg);
    }
    if (!end_epoch(cfg, model, data, now, shard.steps_per_epoch(), *pg, log, accuracy))
      break;  // the step cap ended training inside this epoch
  }

  timing.report(now.global_step, ddp_model, log);
  // Resumed from a finished run: report its accuracy.
  if (!synthetic && !accuracy.known()) accuracy = evaluate(model.net, data.test, *pg);
  log_done(now, accuracy, run_start, log);
  log_weights_digest(model, *pg, log);
  return 0;
}

}  // namespace dtlaunch::train
