#include "volshard/core/mt19937.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace volshard {
namespace {

TEST(Mt19937Test, DrawsExactlyWhatStdMt19937Draws) {
  for (uint32_t seed : {0u, 1u, 5489u, 54476u, 0xFFFFFFFFu}) {
    std::mt19937 reference(seed);
    Mt19937 fast(seed);
    for (int i = 0; i < 5000; ++i)
      ASSERT_EQ(fast(), static_cast<uint32_t>(reference())) << seed << " @" << i;
  }
}

TEST(Mt19937Test, BulkFillContinuesTheSameStreamAcrossTwists) {
  std::mt19937 reference(42);
  Mt19937 fast(42);
  (void)fast();
  (void)reference();
  for (size_t count : {0u, 1u, 623u, 624u, 625u, 1500u, 7u}) {
    std::vector<uint32_t> got(count);
    fast.fill(got.data(), count);
    for (size_t k = 0; k < count; ++k)
      ASSERT_EQ(got[k], static_cast<uint32_t>(reference())) << count;
  }
  fast.discard(1000);
  reference.discard(1000);
  EXPECT_EQ(fast(), static_cast<uint32_t>(reference()));
}

TEST(Mt19937Test, NextU64JoinsTwoDrawsFirstHigh) {
  std::mt19937 reference(7);
  Mt19937 fast(7);
  const uint64_t hi = static_cast<uint32_t>(reference());
  const uint64_t lo = static_cast<uint32_t>(reference());
  EXPECT_EQ(fast.next_u64(), (hi << 32) | lo);
  EXPECT_EQ(join_draws(1u, 2u), 0x0000000100000002ULL);
}

TEST(Mt19937Test, FirstDrawOfSeedZeroIsTheKnownValue) {
  EXPECT_EQ(Mt19937(0)(), 2357136044u);
  EXPECT_EQ(Mt19937()(), 3499211612u);  // default seed 5489
}

}  // namespace
}  // namespace volshard
