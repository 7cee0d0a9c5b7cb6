// DistributedSampler: identical to PyTorch's (python3-torch, which shares libtorch's generator),
// and usable by torch::data::make_data_loader.
#include <torch/data.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "dtlaunch/ddp.h"
#include "dtlaunch_catch.hpp"

using dtlaunch::ddp::DistributedSampler;

namespace {

struct Case {
  size_t n;
  int replicas;
  bool shuffle;
  uint64_t seed;
  bool drop_last;
};

// Shuffle on and off, drop_last on and off, even and uneven sizes, fewer samples than ranks,
// an empty dataset, large seeds; each for every rank and epochs 0-2.
const Case kCases[] = {
    {10, 3, true, 0, false},       {10, 3, true, 0, true},
    {10, 3, false, 0, false},      {10, 3, false, 0, true},
    {12, 4, true, 1, false},       {12, 4, true, 1, true},
    {2, 4, true, 5, false},        {3, 4, true, 5, true},
    {3, 4, false, 5, false},       {0, 2, true, 0, false},
    {17, 1, true, 3, false},       {1000, 7, true, 12345, true},
    {1000, 7, true, 12345, false}, {101, 4, true, 1ull << 40, false},
    {60000, 8, true, 42, false},   {257, 5, true, 0xDEADBEEFCAFEull, true},
};
constexpr uint64_t kEpochs = 3;

std::vector<size_t> parse_line(const std::string& line) {
  std::vector<size_t> out;
  std::istringstream in(line);
  for (size_t v; in >> v;) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("DistributedSampler gives PyTorch's indices", "[ddp][sampler]") {
  std::string cases_path = "/tmp/ddp_sampler_cases_" + std::to_string(::getpid());
  std::vector<std::vector<size_t>> ours;
  std::vector<std::string> labels;
  {
    std::ofstream cases(cases_path);
    for (const auto& c : kCases)
      for (int rank = 0; rank < c.replicas; ++rank)
        for (uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
          cases << c.n << ' ' << c.replicas << ' ' << rank << ' ' << c.shuffle << ' ' << c.seed
                << ' ' << epoch << ' ' << c.drop_last << '\n';
          DistributedSampler s(c.n, c.replicas, rank, c.shuffle, c.seed, c.drop_last);
          s.set_epoch(epoch);
          ours.push_back(s.indices());
          CHECK(ours.back().size() == s.num_samples());
          std::ostringstream label;
          label << "n=" << c.n << " replicas=" << c.replicas << " rank=" << rank
                << " shuffle=" << c.shuffle << " seed=" << c.seed << " epoch=" << epoch
                << " drop_last=" << c.drop_last;
          labels.push_back(label.str());
        }
  }
  const std::string cmd = std::string(PYTHON3) + " " + SAMPLER_REFERENCE + " " + cases_path;
  FILE* py = ::popen(cmd.c_str(), "r");
  REQUIRE(py != nullptr);
  std::string text;
  char buf[1 << 16];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, py)) > 0;) text.append(buf, got);
  const int status = ::pclose(py);
  std::remove(cases_path.c_str());
  REQUIRE(status == 0);

  std::istringstream lines(text);
  std::string line;
  size_t k = 0;
  for (; std::getline(lines, line) && k < ours.size(); ++k) {
    INFO(labels[k]);
    CHECK(parse_line(line) == ours[k]);
  }
  CHECK(k == ours.size());
}

TEST_CASE("DistributedSampler partitions an epoch among the ranks", "[ddp][sampler]") {
  // Without drop_last every index appears, with padding from the head; with it, none twice.
  for (bool drop_last : {false, true}) {
    std::multiset<size_t> seen;
    for (int rank = 0; rank < 3; ++rank) {
      DistributedSampler s(10, 3, rank, true, 9, drop_last);
      s.set_epoch(4);
      for (size_t i : s.indices()) seen.insert(i);
    }
    if (drop_last) {
      CHECK(seen.size() == 9);
      CHECK(std::set<size_t>(seen.begin(), seen.end()).size() == 9);
    } else {
      CHECK(seen.size() == 12);
      CHECK(std::set<size_t>(seen.begin(), seen.end()).size() == 10);
    }
  }
  // Epochs shuffle differently; the same epoch again gives the same order.
  DistributedSampler a(100, 2, 0), b(100, 2, 0);
  a.set_epoch(1);
  b.set_epoch(2);
  CHECK(a.indices() != b.indices());
  b.set_epoch(1);
  CHECK(a.indices() == b.indices());
}

TEST_CASE("DistributedSampler rejects a rank outside the replicas", "[ddp][sampler]") {
  CHECK_THROWS_WITH(DistributedSampler(10, 2, 2),
                    dtlaunch_test::contains_text("rank=2 is not in [0, 1]"));
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), dtlaunch_test::contains_text("num_replicas=0"));
}

namespace {

// Each example is its own index, so a loader's batches show what the sampler chose.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset, int64_t> {
  explicit IndexDataset(size_t n) : n_(n) {}
  int64_t get(size_t index) override { return static_cast<int64_t>(index); }
  torch::optional<size_t> size() const override { return n_; }
  size_t n_;
};

}  // namespace

TEST_CASE("DistributedSampler drives make_data_loader, epochs set through a kept copy",
          "[ddp][sampler]") {
  DistributedSampler sampler(23, 2, 1, true, 7, false);
  DistributedSampler control = sampler;  // shares the epoch with the loader's copy
  auto loader = torch::data::make_data_loader(IndexDataset(23), sampler,
                                              torch::data::DataLoaderOptions().batch_size(5));
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    control.set_epoch(epoch);
    std::vector<size_t> got;
    size_t batches = 0;
    for (auto& batch : *loader) {
      ++batches;
      CHECK(batch.size() <= 5);
      for (int64_t i : batch) got.push_back(static_cast<size_t>(i));
    }
    INFO("epoch " << epoch);
    CHECK(got == control.indices());
    CHECK(batches == 3);  // 12 indices in batches of 5
  }
}
