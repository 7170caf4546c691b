#include "volshard/core/seed_streams.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <unordered_set>
#include <vector>

namespace volshard {
namespace {

using ::testing::HasSubstr;

// Golden values from an independent Python implementation of the formula in
// seed_streams.h (M = 2^64 - 1):
//   def mix(z): z=((z^(z>>30))*0xbf58476d1ce4e5b9)&M; z=((z^(z>>27))*0x94d049bb133111eb)&M; return
//   z^(z>>31) def derive(b,s,e,i): h=mix((b+G)&M); h=mix(((h^s)+G)&M); h=mix(((h^e)+G)&M); return
//   mix(((h^i)+G)&M)
TEST(SeedStreamsTest, Mix64IsSplitMix64sOutputFunction) {
  // The first two outputs of Vigna's splitmix64.c seeded with 0.
  StreamRng rng(0);
  EXPECT_EQ(rng.next_u64(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next_u64(), 0x6e789e6aa1b965f4ULL);
}

TEST(SeedStreamsTest, DerivedSeedsArePinned) {
  EXPECT_EQ(derive_seed(0, Stream::kShared, 0, 0), 0xd1c0270687984b37ULL);
  EXPECT_EQ(derive_seed(0, Stream::kRank, 0, 1), 0x317d159d84f39ea3ULL);
  EXPECT_EQ(derive_seed(0, Stream::kSample, 0, 7), 0x8e4911884035adf4ULL);
  EXPECT_EQ(derive_seed(42, Stream::kSample, 5, ~uint64_t{0}), 0x17d31eb63bbae761ULL);
  const SeedStreams streams(0);
  EXPECT_EQ(streams.rank_seed(1, 0), 0x317d159d84f39ea3ULL);
  EXPECT_EQ(streams.sample_seed(7, 0), 0x8e4911884035adf4ULL);
  EXPECT_EQ(streams.shared_seed(purpose::kModelInit), 0xd1c0270687984b37ULL);
}

TEST(SeedStreamsTest, PermutationSeedIsPyTorchsSeedPlusEpoch) {
  const SeedStreams streams((1ULL << 32) + 10);
  EXPECT_EQ(streams.permutation_seed(5), 15u);
}

TEST(SeedStreamsTest, NoCollisionsAmongAMillionSeedsAcrossRanksSamplesAndEpochs) {
  const SeedStreams streams(1234);
  std::unordered_set<uint64_t> seen;
  seen.reserve(1100000);
  size_t made = 0;
  const auto add = [&](uint64_t s) {
    seen.insert(s);
    ++made;
  };
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    for (int64_t i = 0; i < 100000; ++i) add(streams.sample_seed(i, epoch));
    for (int64_t r = 0; r < 64; ++r) add(streams.rank_seed(r, epoch));
    add(streams.shared_seed(purpose::kModelInit, epoch));
    add(streams.shared_seed(purpose::kWeightedDraw, epoch));
  }
  EXPECT_GE(made, 1000000u);
  EXPECT_EQ(seen.size(), made);
}

TEST(SeedStreamsTest, RankStreamsDifferAcrossRanksAndSharedStreamsDoNot) {
  const SeedStreams a(7), b(7);
  EXPECT_NE(a.rank_seed(0, 0), a.rank_seed(1, 0));
  EXPECT_NE(a.rank_seed(0, 0), a.rank_seed(0, 1));
  EXPECT_EQ(a.shared_seed(purpose::kModelInit), b.shared_seed(purpose::kModelInit));
  EXPECT_NE(a.sample_seed(3, 0), a.sample_seed(3, 1));
}

TEST(SeedStreamsTest, WorkerStreamsSplitTheRankStreamAsDocumented) {
  const SeedStreams a(7);
  // derive_seed(derive_seed(7, kRank, 1, 3), kWorker, 1, 2), computed from the
  // formula in seed_streams.h by an independent Python implementation.
  EXPECT_EQ(a.worker_seed(3, 2, 1), 0xd072b0361510b14ULL);
  std::unordered_set<uint64_t> seen;
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t w = 0; w < 16; ++w) {
      for (int64_t e = 0; e < 4; ++e) seen.insert(a.worker_seed(r, w, e));
    }
  }
  EXPECT_EQ(seen.size(), 64u * 16u * 4u);
}

TEST(SeedStreamsTest, DropoutStreamsSplitTheRankStreamOfAStepByMicroBatch) {
  const SeedStreams a(7);
  // derive_seed(derive_seed(7, kRank, 5, 3), kRank, 5, 1), from the formula in
  // seed_streams.h by an independent Python implementation.
  EXPECT_EQ(a.dropout_seed(3, 5, 1), 0x63594f6d7853f6deULL);
  std::unordered_set<uint64_t> seen;
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t step = 0; step < 64; ++step) {
      for (int64_t m = 0; m < 4; ++m) seen.insert(a.dropout_seed(r, step, m));
    }
  }
  EXPECT_EQ(seen.size(), 16u * 64u * 4u);
}

TEST(StreamRngTest, UniformIntStaysInRangeAndHitsBothEnds) {
  StreamRng rng(5);
  bool lo = false, hi = false;
  for (int k = 0; k < 10000; ++k) {
    const int64_t v = rng.uniform_int(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 3);
    lo |= v == -3;
    hi |= v == 3;
  }
  EXPECT_TRUE(lo && hi);
  EXPECT_EQ(rng.uniform_int(9, 9), 9);
  (void)rng.uniform_int(INT64_MIN, INT64_MAX);  // full range: no overflow
}

TEST(StreamRngTest, BelowIsUnbiasedWhereModuloWouldNotBe) {
  // bound = 3 * 2^62: x % bound would give the low third twice the mass.
  const uint64_t bound = 3ULL << 62;
  StreamRng rng(11);
  int64_t low_third = 0;
  const int64_t draws = 300000;
  for (int64_t k = 0; k < draws; ++k) low_third += rng.below(bound) < (1ULL << 62) ? 1 : 0;
  // Unbiased: p = 1/3, sd = sqrt(n p (1-p)) ~ 258; modulo bias would give 1/2.
  EXPECT_NEAR(static_cast<double>(low_third), draws / 3.0, 5 * 258.0);
}

TEST(StreamRngTest, UniformDoubleAndBernoulliFollowTheirProbabilities) {
  StreamRng rng(3);
  double sum = 0;
  int64_t heads = 0;
  const int n = 200000;
  for (int k = 0; k < n; ++k) {
    const double u = rng.uniform_double();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    heads += rng.bernoulli(0.25) ? 1 : 0;
  }
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(static_cast<double>(heads) / n, 0.25, 5 * std::sqrt(0.25 * 0.75 / n));
  EXPECT_FALSE(StreamRng(1).bernoulli(0.0));
  EXPECT_TRUE(StreamRng(1).bernoulli(1.0));
}

TEST(StreamRngTest, RejectsBadArgumentsNamingThem) {
  StreamRng rng(1);
  EXPECT_THROW(rng.below(0), std::invalid_argument);
  try {
    rng.uniform_int(5, 4);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("lo=5 must be <= hi=4"));
  }
  EXPECT_THROW(rng.bernoulli(1.5), std::invalid_argument);
  EXPECT_THROW(rng.bernoulli(std::nan("")), std::invalid_argument);
}

}  // namespace
}  // namespace volshard
