// dtlaunch-train: a small CNN on Fashion-MNIST trained with dtlaunch's DDP runtime. One process
// per rank; start it with dtlaunch, srun or torchrun (docs/example.md).
#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config.hpp"
#include "contract/settings.hpp"
#include "dataset_cache.hpp"
#include "dtlaunch/ddp.h"
#include "error.hpp"
#include "preflight.hpp"
#include "stop_signal.hpp"

extern char** environ;

namespace {

// LibTorch's c10::Error appends a C++ backtrace to its message; one line is what a user needs.
std::string first_line(const char* text) {
  std::string s(text);
  return s.substr(0, s.find('\n'));
}

// Decimal digits only, as the launcher takes its numbers: "8 ", "0x10", "-1" and "" are errors.
std::optional<std::uint64_t> parse_uint(const std::string& text, std::uint64_t max) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return {};
  std::uint64_t v = 0;
  for (char c : text) {
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (max - digit) / 10) return {};
    v = v * 10 + digit;
  }
  return v;
}

// The numbers of the command line are taken as text and checked here rather than by CLI11:
// its own conversion lets NaN through a PositiveNumber check, wraps "-1" into a huge unsigned
// value, and its errors print the value reformatted (300 digits for "-1" as a double) instead of
// what the user typed.
std::uint64_t whole(const std::string& option, const std::string& text, std::uint64_t min,
                    std::uint64_t max) {
  if (auto v = parse_uint(text, max); v && *v >= min) return *v;
  std::string want = "expected a whole number ";
  want += max == UINT64_MAX ? "of at least " + std::to_string(min)
                            : "from " + std::to_string(min) + " to " + std::to_string(max);
  throw dtlaunch::train::Error::usage(option + " '" + text + "': " + want);
}

// A finite decimal number (no hex, no "inf", no "nan", no blanks) in [min, max], or above min
// when min_exclusive.
double real(const std::string& option, const std::string& text, double min, bool min_exclusive,
            double max, const char* want) {
  bool plain = !text.empty();
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' &&
        c != '-' && c != '+')
      plain = false;
  char* end = nullptr;
  const double v = plain ? std::strtod(text.c_str(), &end) : 0.0;
  if (!plain || end != text.c_str() + text.size() || !std::isfinite(v) ||
      (min_exclusive ? v <= min : v < min) || v > max)
    throw dtlaunch::train::Error::usage(option + " '" + text + "': expected " + want);
  return v;
}

// Every number of the command line as the user typed it, checked after parsing (see whole() and
// real()): its option, its text, its help and the check that stores it in the config.
struct NumberOption {
  std::string option;
  std::string text;
  std::string help;
  std::function<void(const std::string& option, const std::string& text)> check;
};

std::vector<NumberOption> number_options(dtlaunch::train::TrainConfig& cfg) {
  std::vector<NumberOption> numbers;
  auto number = [&](const std::string& option, std::string initial, const std::string& help,
                    std::function<void(const std::string&, const std::string&)> check) {
    numbers.push_back({option, std::move(initial), help, std::move(check)});
  };
  using U = std::uint64_t;
  auto count = [](U* target, U min, U max) {
    return [=](const std::string& o, const std::string& t) { *target = whole(o, t, min, max); };
  };
  number("--epochs", "2", "epochs to train", count(&cfg.epochs, 1, 1000000));
  number("--max-steps", "0",
         "stop after this many optimizer steps in total, resumed ones included (0: no cap)",
         count(&cfg.max_steps, 0, UINT64_MAX));
  number("--batch-size", "64", "samples per rank and step", count(&cfg.batch_size, 1, 1 << 20));
  number("--lr", "0.03", "SGD learning rate", [&](const std::string& o, const std::string& t) {
    cfg.lr = real(o, t, 0, true, std::numeric_limits<double>::max(), "a positive number");
  });
  number("--momentum", "0.9", "SGD momentum", [&](const std::string& o, const std::string& t) {
    cfg.momentum = real(o, t, 0, false, 1, "a number from 0 to 1");
  });
  number("--seed", "0", "seed of the initial weights and of the shuffle",
         count(&cfg.seed, 0, UINT64_MAX));
  number("--threads", "1", "intra-op threads per rank",
         [&](const std::string& o, const std::string& t) {
           cfg.threads = static_cast<int>(whole(o, t, 1, 1024));
         });
  number("--log-every", "50", "steps between progress lines of rank 0 (0: none)",
         count(&cfg.log_every, 0, UINT64_MAX));
  number("--checkpoint-every", "0",
         "also write --checkpoint every N optimizer steps, so that a restart loses at most N "
         "steps and resumes at that exact step (0: only at epoch ends and on a stop signal)",
         count(&cfg.checkpoint_every, 0, UINT64_MAX));
  number("--stop-check-every", "1",
         "steps between the ranks' agreement on a stop signal (0: ignore signals)",
         count(&cfg.stop_check_every, 0, UINT64_MAX));
  // 2^24 samples of 28x28 floats are 52 GB: beyond that it is a typo, not a benchmark.
  number("--synthetic", "0",
         "benchmark mode: N random samples per rank instead of Fashion-MNIST, no evaluation, a "
         "timing line at the end",
         count(&cfg.synthetic, 0, U{1} << 24));
  number("--warmup-steps", "10", "steps left out of the timing line",
         count(&cfg.warmup_steps, 0, UINT64_MAX));
  number("--bucket-cap-mb", "25", "DDP gradient bucket size in MiB",
         [&](const std::string& o, const std::string& t) {
           cfg.bucket_cap_mb =
               real(o, t, 0, true, 1 << 20, "a positive number of MiB up to 1048576");
         });
  number("--rendezvous-timeout", "300",
         "seconds the ranks wait for each other at start-up (rendezvous) before giving up, "
         "naming the missing ranks",
         [&](const std::string& o, const std::string& t) {
           cfg.rendezvous_timeout_s = real(o, t, 0.001, false, 604800,
                                           "a number of seconds from 0.001 to 604800 (a week)");
         });
  return numbers;
}

// CLI11 takes "-5" after an option for an option of its own, and then reports "At Most 1
// required but received 2": so a value that starts with '-' is glued to its option here, and
// the check after parsing names the option and the value instead.
std::vector<std::string> glue_negative_values(const std::vector<std::string>& args,
                                              const std::vector<NumberOption>& numbers) {
  std::vector<std::string> glued;
  for (size_t i = 0; i < args.size(); ++i) {
    bool takes_number = false;
    for (const auto& n : numbers) takes_number = takes_number || n.option == args[i];
    if (takes_number && i + 1 < args.size() && args[i + 1].size() > 1 && args[i + 1][0] == '-' &&
        args[i + 1][1] != '-') {
      glued.push_back(args[i] + "=" + args[i + 1]);
      ++i;
    } else {
      glued.push_back(args[i]);
    }
  }
  return glued;
}

// CLI11 words an option given twice "At Most 1 required but received 2" too.
void refuse_repeated_options(const std::vector<std::string>& args) {
  std::set<std::string> seen;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    if (name.rfind("--", 0) == 0 && name.size() > 2 && !seen.insert(name).second)
      throw dtlaunch::train::Error::usage(name + " is given more than once; give it once");
  }
}

// Fills cfg from the command line; the exit status when the program is to end here (--help, bad
// input), nothing when it is to train.
std::optional<int> parse_command_line(int argc, char** argv, dtlaunch::train::TrainConfig& cfg) {
  CLI::App app{
      "Trains a small CNN on Fashion-MNIST with dtlaunch's DDP runtime, one process per rank.\n"
      "Exit status: 0 done, 75 stopped by SIGUSR1/SIGTERM (after a checkpoint, or during "
      "start-up) (requeue me), 76 a peer was lost (this rank was healthy), 2 bad input, 1 other "
      "failure."};
  app.option_defaults()->always_capture_default();
  std::vector<NumberOption> numbers = number_options(cfg);
  app.add_option("--data-dir", cfg.data_dir, "Fashion-MNIST IDX files, gzipped or plain");
  app.add_option("--cache-dir", cfg.cache_dir, "where gzipped IDX files are unpacked");
  for (NumberOption& n : numbers) app.add_option(n.option, n.text, n.help);
  app.add_option("--backend", cfg.backend, "communication backend")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}));
  auto* ckpt = app.add_option("--checkpoint", cfg.checkpoint,
                              "checkpoint file: written by rank 0 after each epoch and on "
                              "SIGUSR1/SIGTERM; must be visible to every rank");
  app.add_flag("--resume", cfg.resume, "continue from --checkpoint when the file exists")
      ->needs(ckpt);

  std::vector<std::string> glued = glue_negative_values({argv, argv + argc}, numbers);
  std::vector<char*> glued_argv;
  for (auto& a : glued) glued_argv.push_back(a.data());
  try {
    refuse_repeated_options(glued);
    app.parse(static_cast<int>(glued_argv.size()), glued_argv.data());
    for (const NumberOption& n : numbers) n.check(n.option, n.text);
    if (!cfg.checkpoint.empty() || app.count("--checkpoint") > 0)
      dtlaunch::train::check_checkpoint_path(cfg.checkpoint);
    if (cfg.checkpoint_every != 0 && cfg.checkpoint.empty())
      throw dtlaunch::train::Error::usage("--checkpoint-every needs --checkpoint FILE");
  } catch (const CLI::ParseError& e) {
    // CLI11 has a status per kind of error (105, 106, ...); ours is 2 for every bad input.
    return app.exit(e) == 0 ? 0 : static_cast<int>(dtlaunch::train::ExitCode::kBadInput);
  } catch (const dtlaunch::train::Error& e) {
    std::fprintf(stderr, "dtlaunch-train: %s\n", e.what());
    return e.exit_status();
  }
  return std::nullopt;
}

// Trains, and turns each kind of error into its line and exit status.
int train(const dtlaunch::train::TrainConfig& cfg) {
  try {
    dtlaunch::train::install_stop_handlers(dtlaunch::ddp::request_stop);
    return dtlaunch::train::run_training(cfg);
  } catch (const dtlaunch::train::Error& e) {
    std::fprintf(stderr, "dtlaunch-train: %s\n", e.what());
    return e.exit_status();
  } catch (const dtlaunch::ddp::Error& e) {
    // The runtime's message holds its report: for a hang, which rank is where (docs/ddp.md).
    // A lost peer is not this rank's fault: the status says so (kExitPeerLost, 76), so that
    // srun --kill-on-bad-exit ends the step and a job driver tells the victims from the culprit.
    std::fprintf(stderr, "dtlaunch-train: %s error: %s\n", dtlaunch::ddp::to_string(e.kind()),
                 first_line(e.what()).c_str());
    if (e.kind() == dtlaunch::ddp::ErrorKind::kPeerLost) return dtlaunch::ddp::kExitPeerLost;
    // A stop signal during a live recovery: nothing is saved (the state is being mended), and
    // the status is a preemption's, so that a requeued job starts again.
    if (e.kind() == dtlaunch::ddp::ErrorKind::kStopped) return dtlaunch::train::kExitCheckpointed;
    return e.kind() == dtlaunch::ddp::ErrorKind::kConfig
               ? static_cast<int>(dtlaunch::train::ExitCode::kBadInput)
               : static_cast<int>(dtlaunch::train::ExitCode::kFailure);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtlaunch-train: %s\n", first_line(e.what()).c_str());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  dtlaunch::train::TrainConfig cfg;
  cfg.data_dir = dtlaunch::train::kDefaultDataDir;
  const auto xdg_cache_home = dtlaunch::contract::read_text(
      dtlaunch::core::EnvMap::from_environ(environ), dtlaunch::contract::setting::kXdgCacheHome);
  cfg.cache_dir = dtlaunch::train::default_cache_dir(xdg_cache_home.value_or("")).string();
  if (std::optional<int> status = parse_command_line(argc, argv, cfg)) return *status;
  return train(cfg);
}
