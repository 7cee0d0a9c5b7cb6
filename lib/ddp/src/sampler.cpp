// DistributedSampler with the semantics of torch.utils.data.distributed.DistributedSampler
// (PyTorch 1.13, unchanged since): randperm under a generator seeded with seed + epoch, padding
// by repeating the head up to an equal share (or dropping the tail), then indices[rank::R].
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>
#include <torch/serialize/archive.h>

#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp {

DistributedSampler::DistributedSampler(size_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: DistributedSampler num_replicas=" +
                                        std::to_string(num_replicas) + " must be at least 1");
  if (rank < 0 || rank >= num_replicas)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: DistributedSampler rank=" + std::to_string(rank) +
                    " is not in [0, " + std::to_string(num_replicas - 1) + "]");
  recompute_sizes();
  reset(OptionalSize{});
}

void DistributedSampler::recompute_sizes() {
  const size_t r = static_cast<size_t>(replicas_);
  // PyTorch: ceil((N - R) / R) with drop_last and an uneven N, which is floor(N / R);
  // ceil(N / R) otherwise.
  num_samples_ =
      (drop_last_ && dataset_size_ % r != 0) ? dataset_size_ / r : (dataset_size_ + r - 1) / r;
}

std::vector<size_t> DistributedSampler::indices() const {
  std::vector<size_t> all;
  all.reserve(std::max(dataset_size_, total_size()));
  if (shuffle_) {
    // Same generator as Python's torch.Generator().manual_seed(seed + epoch); Python's int
    // seed wraps modulo 2^64 the same way.
    auto gen = at::detail::createCPUGenerator(seed_ + *epoch_);
    at::Tensor perm = at::randperm(static_cast<int64_t>(dataset_size_), gen);
    const int64_t* p = perm.data_ptr<int64_t>();
    for (size_t i = 0; i < dataset_size_; ++i) all.push_back(static_cast<size_t>(p[i]));
  } else {
    for (size_t i = 0; i < dataset_size_; ++i) all.push_back(i);
  }
  const size_t total = total_size();
  if (all.size() < total) {
    // indices += indices[:padding], repeating the whole list as often as needed.
    const size_t n = all.size();
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % n]);
  } else {
    all.resize(total);
  }
  std::vector<size_t> mine;
  mine.reserve(num_samples_);
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(replicas_))
    mine.push_back(all[i]);
  return mine;
}

void DistributedSampler::set_epoch(uint64_t epoch) {
  *epoch_ = epoch;
  epoch_indices_ = indices();
  cursor_ = 0;
}

void DistributedSampler::reset(OptionalSize new_size) {
  if (new_size && *new_size != dataset_size_) {
    dataset_size_ = *new_size;
    recompute_sizes();
  }
  epoch_indices_ = indices();
  cursor_ = 0;
}

DistributedSampler::OptionalBatch DistributedSampler::next(size_t batch_size) {
  if (cursor_ >= epoch_indices_.size() || batch_size == 0) return {};
  const size_t end = std::min(epoch_indices_.size(), cursor_ + batch_size);
  std::vector<size_t> batch(epoch_indices_.begin() + static_cast<std::ptrdiff_t>(cursor_),
                            epoch_indices_.begin() + static_cast<std::ptrdiff_t>(end));
  cursor_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("dataset_size", c10::IValue(static_cast<int64_t>(dataset_size_)));
  archive.write("epoch", c10::IValue(static_cast<int64_t>(*epoch_)));
  archive.write("cursor", c10::IValue(static_cast<int64_t>(cursor_)));
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  c10::IValue size, epoch, cursor;
  archive.read("dataset_size", size);
  archive.read("epoch", epoch);
  archive.read("cursor", cursor);
  if (static_cast<size_t>(size.toInt()) != dataset_size_)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: DistributedSampler state is for a dataset of " +
                                        std::to_string(size.toInt()) + " samples, not " +
                                        std::to_string(dataset_size_));
  set_epoch(static_cast<uint64_t>(epoch.toInt()));
  cursor_ = std::min(epoch_indices_.size(), static_cast<size_t>(cursor.toInt()));
}

}  // namespace dtlaunch::ddp
