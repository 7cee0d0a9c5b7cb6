#include "checkpoint.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "error.hpp"

namespace dtlaunch::train {
namespace {

// Bumped whenever the layout below changes, so an old file is refused by name, not misread.
constexpr std::int64_t kFormatVersion = 1;

// [version, epoch, step_in_epoch, global_step, world_size, batch_size, seed]
constexpr std::int64_t kProgressFields = 7;

}  // namespace

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const Progress& p) {
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);

  std::vector<std::int64_t> fields = {kFormatVersion,
                                      static_cast<std::int64_t>(p.epoch),
                                      static_cast<std::int64_t>(p.step_in_epoch),
                                      static_cast<std::int64_t>(p.global_step),
                                      static_cast<std::int64_t>(p.world_size),
                                      static_cast<std::int64_t>(p.batch_size),
                                      static_cast<std::int64_t>(p.seed)};
  torch::serialize::OutputArchive archive;
  archive.write("dtlaunch_train_progress", at::tensor(fields, at::kLong));
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    archive.save_to(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    std::string what = e.what();
    throw Error(ExitCode::kFailure,
                "cannot write checkpoint " + tmp + ": " + what.substr(0, what.find('\n')));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw Error::system("cannot rename " + tmp + " to " + path, err);
  }
}

Progress load_checkpoint(const std::string& path, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer) {
  auto refuse = [&](const std::string& why) {
    return Error(ExitCode::kBadInput, path + ": not a dtlaunch-train checkpoint (" + why + ")");
  };
  torch::serialize::InputArchive archive;
  at::Tensor fields;
  try {
    archive.load_from(path);
    archive.read("dtlaunch_train_progress", fields);
  } catch (const c10::Error& e) {
    throw refuse(e.what_without_backtrace());
  }
  if (fields.scalar_type() != at::kLong || fields.dim() != 1 || fields.numel() != kProgressFields)
    throw refuse("progress record has the wrong shape");
  auto f = fields.accessor<std::int64_t, 1>();
  if (f[0] != kFormatVersion)
    throw refuse("format version " + std::to_string(f[0]) + ", expected " +
                 std::to_string(kFormatVersion));
  for (std::int64_t i = 1; i < kProgressFields; ++i)
    if (f[i] < 0) throw refuse("negative progress field");

  try {
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw refuse(e.what_without_backtrace());
  }

  auto u = [&](std::int64_t i) { return static_cast<std::uint64_t>(f[i]); };
  return Progress{u(1), u(2), u(3), u(4), u(5), u(6)};
}

}  // namespace dtlaunch::train
