// data_split.cpp: validation volumes dealt to ranks by cost or by count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "volshard/trainer/data_split.h"

namespace volshard {
namespace {

TEST(ValidationBalanceTest, TheCostliestVolumeGoesFirstToTheLeastLoadedRank) {
  const std::vector<int64_t> costs{10, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const auto by_cost = assign_validation(costs, 2, ValBalance::kCost);
  EXPECT_EQ(by_cost[0], std::vector<int64_t>{0});
  EXPECT_EQ(by_cost[1], (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const auto by_count = assign_validation(costs, 2, ValBalance::kCount);
  EXPECT_EQ(by_count[0], (std::vector<int64_t>{0, 2, 4, 6, 8}));  // MONAI's: loads 14 and 5
  EXPECT_EQ(by_count[1], (std::vector<int64_t>{1, 3, 5, 7, 9}));
  // Properties over random sets: every volume once, lists ascending, and the
  // greedy bound (no rank above the mean load plus the costliest volume).
  uint64_t state = 1;
  const auto next = [&state] {
    return state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<int64_t>(next() >> 59) + 1;      // 1..32
    const auto world = static_cast<int64_t>(next() >> 61) + 1;  // 1..8
    std::vector<int64_t> c(static_cast<size_t>(n));
    int64_t total = 0, most = 0;
    for (auto& v : c) {
      v = static_cast<int64_t>(1 + (next() >> 40) % ((next() >> 63) ? 1000 : 10));
      total += v;
      most = std::max(most, v);
    }
    for (const ValBalance b : {ValBalance::kCost, ValBalance::kCount}) {
      const auto ranks = assign_validation(c, world, b);
      ASSERT_EQ(static_cast<int64_t>(ranks.size()), world);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (const auto& r : ranks) {
        EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
        int64_t load = 0;
        for (const int64_t i : r) {
          ++seen[static_cast<size_t>(i)];
          load += c[static_cast<size_t>(i)];
        }
        if (b == ValBalance::kCost) {
          EXPECT_LE(load, total / world + most) << "trial " << trial;
        }
      }
      EXPECT_EQ(seen, std::vector<int>(static_cast<size_t>(n), 1));
    }
  }
}

}  // namespace
}  // namespace volshard
