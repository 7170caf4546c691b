// Golden per-rank indices made by PyTorch 1.13's DistributedSampler (and
// MONAI's even_divisible=False rule) with oracle/make_golden.py.
#include "volshard/sampler/distributed_sampler.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace volshard {
namespace {

nlohmann::json load_golden() {
  std::ifstream in(VOLSHARD_SAMPLER_GOLDEN);
  if (!in) throw std::runtime_error(std::string("cannot open ") + VOLSHARD_SAMPLER_GOLDEN);
  return nlohmann::json::parse(in);
}

TEST(DistributedSamplerGoldenTest, EqualsPyTorchForEveryGoldenCase) {
  const auto golden = load_golden();
  const auto& cases = golden.at("cases");
  ASSERT_GT(cases.size(), 2000u);
  int64_t uneven = 0, drop = 0, big_seed = 0;
  for (const auto& c : cases) {
    DistributedSamplerOptions o;
    o.dataset_size = c.at("size").get<int64_t>();
    o.num_replicas = c.at("world_size").get<int64_t>();
    o.mode = parse_partition_mode(c.at("mode").get<std::string>());
    o.shuffle = c.at("shuffle").get<bool>();
    o.seed = c.at("seed").get<uint64_t>();
    const auto epoch = c.at("epoch").get<int64_t>();
    const auto shards = c.at("shards").get<std::vector<std::vector<int64_t>>>();
    ASSERT_EQ(static_cast<int64_t>(shards.size()), o.num_replicas);
    for (o.rank = 0; o.rank < o.num_replicas; ++o.rank) {
      DistributedSampler s(o);
      s.set_epoch(epoch);
      ASSERT_EQ(s.indices().to_vector(), shards[static_cast<size_t>(o.rank)])
          << "n=" << o.dataset_size << " W=" << o.num_replicas << " rank=" << o.rank
          << " mode=" << to_string(o.mode) << " shuffle=" << o.shuffle << " seed=" << o.seed
          << " epoch=" << epoch;
      ASSERT_EQ(s.num_samples(), static_cast<int64_t>(shards[static_cast<size_t>(o.rank)].size()));
    }
    uneven += o.mode == PartitionMode::kUneven;
    drop += o.mode == PartitionMode::kDropLast;
    big_seed += o.seed >= (1ull << 32);
  }
  EXPECT_GT(uneven, 0);
  EXPECT_GT(drop, 0);
  EXPECT_GT(big_seed, 0);
}

}  // namespace
}  // namespace volshard
