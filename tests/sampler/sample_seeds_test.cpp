#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "volshard/core/seed_streams.h"
#include "volshard/sampler/shard_check.h"

namespace volshard {
namespace {

TEST(SeedStreamsTest, SampleSeedsDoNotDependOnWorldSizeOrThreads) {
  // Each rank derives the seeds of the indices it reads; whatever W, the
  // seed of index i in epoch e is the same.
  const SeedStreams streams(99);
  const auto seeds_by_index = [&](int64_t world) {
    std::vector<uint64_t> by_index(50, 0);
    DistributedSamplerOptions o;
    o.dataset_size = 50;
    o.num_replicas = world;
    o.mode = PartitionMode::kUneven;
    for (const auto& shard : all_shards(o, 3)) {
      for (int64_t i : shard) by_index[static_cast<size_t>(i)] = streams.sample_seed(i, 3);
    }
    return by_index;
  };
  EXPECT_EQ(seeds_by_index(1), seeds_by_index(2));
  EXPECT_EQ(seeds_by_index(1), seeds_by_index(7));
  std::vector<uint64_t> threaded(50, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < 50; i += 4)
        threaded[static_cast<size_t>(i)] = streams.sample_seed(i, 3);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(threaded, seeds_by_index(1));
}

}  // namespace
}  // namespace volshard
