#include "volshard/sampler/batching.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sampler_test_util.h"

namespace volshard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DistributedSampler sampler(int64_t n, int64_t w, int64_t r, PartitionMode mode) {
  return DistributedSampler(test::sampler_options(n, w, r, mode, /*shuffle=*/false));
}

TEST(BatchViewTest, SplitsTheShardInOrderWithAShortLastBatch) {
  auto s = sampler(21, 2, 0, PartitionMode::kPad);  // 0 2 4 ... 20
  BatchView batches(s.indices(), 5, false);
  ASSERT_EQ(batches.num_batches(), 3);
  EXPECT_THAT(batches.batch(0).to_vector(), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_THAT(batches.batch(2).to_vector(), ElementsAre(20));
  EXPECT_EQ(BatchView(s.indices(), 5, true).num_batches(), 2);
}

TEST(BatchViewTest, RejectsZeroBatchAndOutOfRangeBatch) {
  auto s = sampler(4, 1, 0, PartitionMode::kPad);
  EXPECT_THROW(BatchView(s.indices(), 0, false), std::invalid_argument);
  BatchView batches(s.indices(), 3, false);
  try {
    (void)batches.batch(2);
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_THAT(e.what(), HasSubstr("batch=2 out of range [0, 2)"));
  }
}

TEST(BatchViewTest, EveryRankTakesTheSameStepsInPadAndDropLast) {
  for (auto mode : {PartitionMode::kPad, PartitionMode::kDropLast}) {
    const auto layout = ShardLayout::make(23, 4, mode);
    for (int64_t r = 0; r < 4; ++r) {
      auto s = sampler(23, 4, r, mode);
      EXPECT_EQ(BatchView(s.indices(), 2, false).num_batches(),
                max_steps_per_epoch(layout, 2, false));
    }
  }
}

TEST(BatchViewTest, UnevenMaxStepsIsKnownToEveryRankWithoutCommunication) {
  // n = 9, W = 4: shards of 3, 2, 2, 2; batch 2 -> steps 2, 1, 1, 1.
  const auto layout = ShardLayout::make(9, 4, PartitionMode::kUneven);
  EXPECT_EQ(max_steps_per_epoch(layout, 2, false), 2);
  EXPECT_EQ(max_steps_per_epoch(layout, 2, true), 1);
  int64_t most = 0;
  for (int64_t r = 0; r < 4; ++r) {
    auto s = sampler(9, 4, r, PartitionMode::kUneven);
    most = std::max(most, BatchView(s.indices(), 2, false).num_batches());
  }
  EXPECT_EQ(most, max_steps_per_epoch(layout, 2, false));
}

}  // namespace
}  // namespace volshard
