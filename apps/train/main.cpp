// dtlaunch-train: a small CNN on Fashion-MNIST trained with dtlaunch's DDP runtime. One process
// per rank; start it with dtlaunch, srun or torchrun (docs/example.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "config.hpp"
#include "core/error.hpp"
#include "dataset_cache.hpp"
#include "stop_signal.hpp"

namespace {

// LibTorch's c10::Error appends a C++ backtrace to its message; one line is what a user needs.
std::string first_line(const char* text) {
  std::string s(text);
  return s.substr(0, s.find('\n'));
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

int main(int argc, char** argv) {
  using dtlaunch::train::TrainConfig;
  TrainConfig cfg;
  cfg.data_dir = dtlaunch::train::kDefaultDataDir;
  cfg.cache_dir = dtlaunch::train::default_cache_dir(env_or_empty("XDG_CACHE_HOME")).string();

  CLI::App app{
      "Trains a small CNN on Fashion-MNIST with dtlaunch's DDP runtime, one process per rank.\n"
      "Exit status: 0 done, 75 stopped by SIGUSR1/SIGTERM after a checkpoint (requeue me), "
      "2 bad input, 1 other failure."};
  app.option_defaults()->always_capture_default();
  app.add_option("--data-dir", cfg.data_dir, "Fashion-MNIST IDX files, gzipped or plain");
  app.add_option("--cache-dir", cfg.cache_dir, "where gzipped IDX files are unpacked");
  app.add_option("--epochs", cfg.epochs, "epochs to train")->check(CLI::Range(1, 1000000));
  app.add_option(
      "--max-steps", cfg.max_steps,
      "stop after this many optimizer steps in total, resumed ones included (0: no cap)");
  app.add_option("--batch-size", cfg.batch_size, "samples per rank and step")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--lr", cfg.lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--momentum", cfg.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", cfg.seed, "seed of the initial weights and of the shuffle");
  app.add_option("--threads", cfg.threads, "intra-op threads per rank")->check(CLI::Range(1, 1024));
  app.add_option("--backend", cfg.backend, "communication backend")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}));
  app.add_option("--log-every", cfg.log_every, "steps between progress lines of rank 0 (0: none)");
  auto* ckpt = app.add_option("--checkpoint", cfg.checkpoint,
                              "checkpoint file: written by rank 0 after each epoch and on "
                              "SIGUSR1/SIGTERM; must be visible to every rank");
  app.add_flag("--resume", cfg.resume, "continue from --checkpoint when the file exists")
      ->needs(ckpt);
  app.add_option("--stop-check-every", cfg.stop_check_every,
                 "steps between the ranks' agreement on a stop signal (0: ignore signals)");
  app.add_option("--synthetic", cfg.synthetic,
                 "benchmark mode: N random samples per rank instead of Fashion-MNIST, no "
                 "evaluation, a timing line at the end");
  app.add_option("--warmup-steps", cfg.warmup_steps, "steps left out of the timing line");
  app.add_option("--bucket-cap-mb", cfg.bucket_cap_mb, "DDP gradient bucket size in MiB")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 has a status per kind of error (105, 106, ...); ours is 2 for every bad input.
    return app.exit(e) == 0 ? 0 : static_cast<int>(dtlaunch::ExitCode::kBadInput);
  }

  try {
    dtlaunch::train::install_stop_handlers();
    return dtlaunch::train::run_training(cfg);
  } catch (const dtlaunch::Error& e) {
    std::fprintf(stderr, "dtlaunch-train: %s\n", e.what());
    return e.exit_status();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtlaunch-train: %s\n", first_line(e.what()).c_str());
    return 1;
  }
}
