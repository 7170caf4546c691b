#include "volshard/sampler/shard_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sampler_test_util.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

DistributedSamplerOptions options(int64_t n, int64_t w, PartitionMode mode) {
  return test::sampler_options(n, w, 0, mode);
}

TEST(ShardCheckTest, PassesRealShardsAndCountsPaddingAndMoves) {
  const auto o = options(21, 2, PartitionMode::kPad);
  const auto e0 = all_shards(o, 0);
  const auto e1 = all_shards(o, 1);
  const auto c0 = check_epoch(o, 0, e0, nullptr);
  EXPECT_TRUE(c0.ok());
  EXPECT_EQ(c0.padded, 1);
  EXPECT_EQ(c0.changed_rank, -1);
  const auto c1 = check_epoch(o, 1, e1, &e0);
  EXPECT_TRUE(c1.ok());
  EXPECT_EQ(c1.changed_rank, count_changed_owner(21, e0, e1));
  EXPECT_GT(c1.changed_rank, 0);
}

TEST(ShardCheckTest, CountsDroppedSamples) {
  const auto o = options(21, 4, PartitionMode::kDropLast);
  const auto c = check_epoch(o, 0, all_shards(o, 0), nullptr);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.dropped, 1);
}

TEST(ShardCheckTest, FlagsASwappedIndexAndAMissingSample) {
  const auto o = options(10, 2, PartitionMode::kUneven);
  auto shards = all_shards(o, 0);
  shards[1][0] = shards[0][0];  // one sample twice, another on no rank
  const auto c = check_epoch(o, 0, shards, nullptr);
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(testing::PrintToString(c.failures), HasSubstr("rank 1 differs from order[r::W]"));
  EXPECT_THAT(testing::PrintToString(c.failures), HasSubstr("1 samples on no rank"));
}

TEST(ShardCheckTest, FlagsAnEpochThatDidNotReshuffle) {
  const auto o = options(50, 2, PartitionMode::kPad);
  const auto e0 = all_shards(o, 0);
  const auto c = check_epoch(o, 1, e0, &e0);  // epoch 0's shards presented as epoch 1
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(testing::PrintToString(c.failures),
              HasSubstr("order identical to the previous epoch"));
}

TEST(ShardCheckTest, FlagsWrongShardSizes) {
  const auto o = options(10, 2, PartitionMode::kPad);
  auto shards = all_shards(o, 0);
  shards[0].pop_back();
  const auto c = check_epoch(o, 0, shards, nullptr);
  EXPECT_THAT(testing::PrintToString(c.failures), HasSubstr("rank 0 has 4 samples, expected 5"));
}

}  // namespace
}  // namespace volshard
