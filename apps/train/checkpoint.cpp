#include "checkpoint.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <unistd.h>

#include <span>
#include <sstream>
#include <vector>

#include "checkpoint_file.hpp"
#include "core/hmac.hpp"
#include "error.hpp"

namespace dtlaunch::train {
namespace {

// Bumped whenever the layout below changes, so an old file is refused by name, not misread.
constexpr std::int64_t kFormatVersion = 1;

// A checkpoint of this model is about 1 MB; anything near this is not one.
constexpr std::size_t kMaxCheckpointBytes = std::size_t{1} << 30;

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
                                      static_cast<std::int64_t>(p.order.world_size),
                                      static_cast<std::int64_t>(p.order.batch_size),
                                      static_cast<std::int64_t>(p.order.seed)};
  torch::serialize::OutputArchive archive;
  archive.write("dtlaunch_train_progress", at::tensor(fields, at::kLong));
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);

  // Serialized in memory and written by replace_file: LibTorch's own file writer aborts the
  // process when the disk fills (its destructor throws), and would write through a device node.
  std::ostringstream payload;
  archive.save_to(payload);
  replace_file(path, seal_checkpoint(payload.str()), /*keep_previous=*/true);
}

void check_progress(const std::string& path, const Progress& p, const RunShape& shape) {
  auto bad = [&](const std::string& why) { return Error(ExitCode::kBadInput, path + ": " + why); };
  if (p.order != shape.order)
    throw bad("written by a run with " + std::to_string(p.order.world_size) +
              " ranks, --batch-size " + std::to_string(p.order.batch_size) + ", --seed " +
              std::to_string(p.order.seed) + "; resume with the same values");
  const auto n = [](std::uint64_t v) { return std::to_string(v); };
  const std::string fit = "; it does not fit this run (" + n(shape.epochs) + " epoch(s) of " +
                          n(shape.steps_per_epoch) +
                          " steps): was it written with other data, or more --epochs?";
  if (p.epoch > shape.epochs || (p.epoch == shape.epochs && p.step_in_epoch != 0))
    throw bad("the progress record says epoch " + n(p.epoch + 1) + " step " + n(p.step_in_epoch) +
              fit);
  if (p.step_in_epoch != 0 && p.step_in_epoch >= shape.steps_per_epoch)
    throw bad("the progress record says step " + n(p.step_in_epoch) + " of an epoch" + fit);
  // epoch * steps_per_epoch + step_in_epoch, without overflow (epoch <= epochs, both small).
  if (p.global_step != p.epoch * shape.steps_per_epoch + p.step_in_epoch)
    throw bad("the progress record says global step " + n(p.global_step) + " at epoch " +
              n(p.epoch + 1) + " step " + n(p.step_in_epoch) + fit);
}

Progress load_checkpoint(const std::string& path, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer, const RunShape& shape) {
  auto refuse = [&](const std::string& why) {
    return Error(ExitCode::kBadInput, path + ": not a dtlaunch-train checkpoint (" + why + ")");
  };
  std::istringstream payload(unseal_checkpoint(path, read_regular_file(path, kMaxCheckpointBytes)));
  torch::serialize::InputArchive archive;
  at::Tensor fields;
  try {
    archive.load_from(payload);
    archive.read("dtlaunch_train_progress", fields);
  } catch (const c10::Error& e) {
    throw refuse(e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw refuse(e.what());
  }
  if (fields.scalar_type() != at::kLong || fields.dim() != 1 || fields.numel() != kProgressFields)
    throw refuse("progress record has the wrong shape");
  auto f = fields.accessor<std::int64_t, 1>();
  if (f[0] != kFormatVersion)
    throw refuse("format version " + std::to_string(f[0]) + ", expected " +
                 std::to_string(kFormatVersion));
  for (std::int64_t i = 1; i < kProgressFields; ++i)
    if (f[i] < 0) throw refuse("negative progress field");
  auto u = [&](std::int64_t i) { return static_cast<std::uint64_t>(f[i]); };
  const Progress progress{u(1), u(2), u(3), {u(4), u(5), u(6)}};
  // Before the weights: a record that does not fit says why, not what the model load stumbles on.
  check_progress(path, progress, shape);

  try {
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw refuse(e.what_without_backtrace());
  } catch (const std::exception& e) {
    // A sealed file that still does not parse (std::out_of_range from a map lookup, ...).
    throw refuse(e.what());
  }
  return progress;
}

std::string weights_sha256(const torch::nn::Module& model) {
  core::Sha256 hash;
  const auto add = [&hash](const std::string& name, const at::Tensor& value) {
    const at::Tensor t = value.detach().to(at::kCPU).contiguous();
    // Name, dtype and shape first, so that bytes that merely line up differently do not match.
    std::string head = name + '\n' + std::string(c10::toString(t.scalar_type())) + '\n';
    for (const std::int64_t d : t.sizes()) head += std::to_string(d) + ' ';
    hash.update(head + '\n');
    hash.update(std::span<const uint8_t>(static_cast<const uint8_t*>(t.data_ptr()),
                                         t.numel() * t.element_size()));
  };
  for (const auto& p : model.named_parameters(/*recurse=*/true)) add(p.key(), p.value());
  for (const auto& b : model.named_buffers(/*recurse=*/true)) add("buffer " + b.key(), b.value());
  return core::to_hex(hash.finish());
}

}  // namespace dtlaunch::train
