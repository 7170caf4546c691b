// RankPlan: what a rank runs with, resolved once. Its epochs, dealt from the
// sampler's orders, make the steps it promises on every rank and cover the
// order exactly; the rest is the options' and the machine's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/rank_plan.h"

namespace volshard {
namespace {

TrainOptions valid_options() {
  TrainOptions o;
  o.data_dir = "data";  // validate() reads no file
  o.out_dir = "run";
  o.device = DeviceKind::kCpu;
  return o;
}

// Epoch `epoch`'s order on `plan`'s rank over `n` volumes, dealt.
DealtEpoch dealt(const RankPlan& plan, int64_t n, int64_t epoch) {
  DistributedSampler s(plan.sampler(n));
  s.set_epoch(epoch);
  return plan.deal(s.indices().to_vector());
}

int64_t sum_batches(const DealtEpoch& d) {
  int64_t total = 0;
  for (const StepShare& s : d.steps) total += s.batches;
  return total;
}

TEST(RankPlanTest, EveryRankDealsTheStepsPerEpochItPromisesAndEachBatchOnce) {
  for (const bool invariant : {false, true}) {
    for (int64_t world = 1; world <= 4; ++world) {
      for (int64_t batch = 1; batch <= 3; ++batch) {
        for (int64_t accumulate = 1; accumulate <= (invariant ? 1 : 3); ++accumulate) {
          for (int64_t n = 1; n <= 13; ++n) {
            TrainOptions o = valid_options();
            o.invariant = invariant;
            o.batch_size = batch;
            o.accumulate = accumulate;
            const std::string where = "invariant=" + std::to_string(invariant) +
                                      " W=" + std::to_string(world) + " B=" +
                                      std::to_string(batch) + " A=" + std::to_string(accumulate) +
                                      " n=" + std::to_string(n);
            std::vector<int64_t> positions;  // of each step, as rank 0 counts them
            std::multiset<int64_t> fed;      // every rank's volumes of the epoch
            for (int64_t r = 0; r < world; ++r) {
              const RankPlan plan = RankPlan::make(o, r, world);
              const DealtEpoch d = dealt(plan, n, 3);
              ASSERT_EQ(static_cast<int64_t>(d.steps.size()), plan.steps_per_epoch(n)) << where;
              // Its loader makes exactly the batches its steps take.
              const auto indices = static_cast<int64_t>(d.indices.size());
              ASSERT_EQ(sum_batches(d), (indices + plan.loader_batch - 1) / plan.loader_batch)
                  << where;
              std::vector<int64_t> mine;
              for (const StepShare& s : d.steps) mine.push_back(s.positions);
              if (r == 0) positions = mine;
              ASSERT_EQ(mine, positions) << where << ": ranks agree on each step's positions";
              fed.insert(d.indices.begin(), d.indices.end());
            }
            if (invariant) {
              // One global order, each volume once, every position counted once.
              ASSERT_EQ(static_cast<int64_t>(fed.size()), n) << where;
              ASSERT_EQ(static_cast<int64_t>(std::set<int64_t>(fed.begin(), fed.end()).size()),
                        n)
                  << where;
              int64_t total = 0;
              for (const int64_t p : positions) total += p;
              ASSERT_EQ(total, n) << where;
            } else {
              // DistributedSampler's padding: every volume at least once.
              ASSERT_EQ(static_cast<int64_t>(std::set<int64_t>(fed.begin(), fed.end()).size()),
                        n)
                  << where;
            }
          }
        }
      }
    }
  }
}

TEST(RankPlanTest, InvariantStepsDealTheirKthVolumeToRankKModWorld) {
  TrainOptions o = valid_options();
  o.invariant = true;
  o.batch_size = 4;
  const std::vector<int64_t> order{9, 8, 7, 6, 5, 4, 3, 2, 1, 0};  // any global order
  const DealtEpoch r0 = RankPlan::make(o, 0, 3).deal(order);
  const DealtEpoch r2 = RankPlan::make(o, 2, 3).deal(order);
  // Steps of positions [0,4), [4,8), [8,10): rank 0 takes their 0th and 3rd.
  EXPECT_EQ(r0.indices, (std::vector<int64_t>{9, 6, 5, 2, 1}));
  EXPECT_EQ(r0.steps, (std::vector<StepShare>{{2, 4}, {2, 4}, {1, 2}}));
  EXPECT_EQ(r2.indices, (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(r2.steps, (std::vector<StepShare>{{1, 4}, {1, 4}, {0, 2}}));
  EXPECT_EQ(RankPlan::make(o, 0, 3).loader_batch, 1);
}

TEST(RankPlanTest, AccumulatedStepsTakeTheirBatchesOfEveryRankAndFewerAtTheEnd) {
  TrainOptions o = valid_options();
  o.batch_size = 2;
  o.accumulate = 3;
  const RankPlan plan = RankPlan::make(o, 1, 2);
  // 11 volumes a rank: 6 batches, 2 steps of 3; 13: 7 batches, 3 steps, the last of one.
  EXPECT_EQ(plan.steps_per_epoch(22), 2);
  const DealtEpoch d = plan.deal(std::vector<int64_t>(13, 0));
  EXPECT_EQ(d.steps, (std::vector<StepShare>{{3, 12}, {3, 12}, {1, 4}}));
  EXPECT_EQ(plan.loader_batch, 2);
  EXPECT_EQ(plan.sampler(22).num_replicas, 2);
  EXPECT_EQ(plan.sampler(22).rank, 1);
}

TEST(RankPlanTest, ModeThreadsAndSeedsComeFromTheOptions) {
  TrainOptions o = valid_options();
  o.seed = 7;
  o.threads = 3;
  RankPlan plan = RankPlan::make(o, 1, 2);
  EXPECT_EQ(plan.mode, StepMode::kBatched);
  EXPECT_EQ(plan.threads, 3);
  EXPECT_TRUE(plan.device.is_cpu());
  EXPECT_FALSE(plan.cache_device.has_value());  // --cache-device host
  EXPECT_EQ(plan.backend, Backend::kGloo);       // auto, on the CPU
  EXPECT_EQ(plan.dropout_seed(5, 1), SeedStreams(7).dropout_seed(1, 5, 1));
  EXPECT_NE(plan.dropout_seed(5, 1), RankPlan::make(o, 0, 2).dropout_seed(5, 1));
  EXPECT_TRUE(plan.read_every_step);  // --fingerprints, the default
  o.fingerprints = false;
  EXPECT_FALSE(RankPlan::make(o, 1, 2).read_every_step);
  o.threads = 0;
  o.invariant = true;  // its sums split by thread: one
  plan = RankPlan::make(o, 1, 2);
  EXPECT_EQ(plan.mode, StepMode::kInvariant);
  EXPECT_EQ(plan.threads, 1);
  EXPECT_EQ(plan.order_world(), 1);
  EXPECT_EQ(plan.sampler(10).num_replicas, 1);
  o.cache_device = CacheDevice::kDevice;
  o.roi = {48, 64, 32};
  plan = RankPlan::make(o, 0, 1);
  EXPECT_EQ(plan.cache_device, c10::Device(c10::kCPU));
  EXPECT_EQ(plan.val_window, (std::array<int64_t, 3>{48, 64, 32}));
}

TEST(RankPlanTest, RefusesARankOutsideTheWorldAndOptionsThatDoNotValidate) {
  const TrainOptions o = valid_options();
  try {
    (void)RankPlan::make(o, 2, 2);
    FAIL() << "rank 2 of 2 was planned";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("rank 2 of a world of 2"));
  }
  TrainOptions bad = o;
  bad.roi = {40, 56};  // neither a cube nor x,y,z
  EXPECT_THROW((void)RankPlan::make(bad, 0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace volshard
