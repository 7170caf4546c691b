#include "volshard/sampler/weighted_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace volshard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Shards = std::vector<std::vector<int64_t>>;

// The weight formulas of oracle/make_weighted_golden.py's weights_of(): the
// same IEEE operations, so the same doubles.
std::vector<double> weights_of(const std::string& kind, int64_t n) {
  std::vector<double> w;
  for (int64_t i = 0; i < n; ++i) {
    if (kind == "linear") {
      w.push_back(static_cast<double>(i + 1));
    } else if (kind == "reciprocal") {
      w.push_back(1.0 / static_cast<double>(i + 1));
    } else if (kind == "sparse") {
      w.push_back(i % 3 == 0 ? 0.0 : static_cast<double>(i % 5) + 0.5);
    } else {
      throw std::invalid_argument("unknown weights kind " + kind);
    }
  }
  return w;
}

DistributedWeightedSamplerOptions make(std::vector<double> weights, int64_t w, int64_t rank,
                                       uint64_t generator_seed, int64_t num_samples_per_rank = -1,
                                       PartitionMode mode = PartitionMode::kPad,
                                       bool shuffle = false, uint64_t seed = 0) {
  DistributedWeightedSamplerOptions o;
  o.sampler.dataset_size = static_cast<int64_t>(weights.size());
  o.sampler.num_replicas = w;
  o.sampler.rank = rank;
  o.sampler.mode = mode;
  o.sampler.shuffle = shuffle;
  o.sampler.seed = seed;
  o.weights = std::move(weights);
  o.num_samples_per_rank = num_samples_per_rank;
  o.generator_seed = generator_seed;
  return o;
}

Shards all_draws(DistributedWeightedSamplerOptions o, int64_t epoch = 0) {
  Shards out;
  for (o.sampler.rank = 0; o.sampler.rank < o.sampler.num_replicas; ++o.sampler.rank) {
    DistributedWeightedSampler s(o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

// Dataset values are index + 1, as in MONAI's test.
Shards plus_one(Shards shards) {
  for (auto& shard : shards) {
    for (int64_t& i : shard) ++i;
  }
  return shards;
}

std::string error_of(const DistributedWeightedSamplerOptions& o) {
  try {
    DistributedWeightedSampler s(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

std::string indices_error_of(const DistributedWeightedSamplerOptions& o, int64_t epoch) {
  DistributedWeightedSampler s(o);
  s.set_epoch(epoch);
  try {
    (void)s.indices();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

// MONAI tests/test_sampler_dist.py (DistributedWeightedRandomSampler): data
// [1..5], weights [1..5], 2 ranks, each with torch.Generator().manual_seed(0).
TEST(WeightedSamplerTest, ReproducesMonaiTestValuesForSeedZero) {
  EXPECT_EQ(plus_one(all_draws(make(weights_of("linear", 5), 2, 0, 0))),
            (Shards{{5, 5, 5}, {1, 4, 4}}));
}

TEST(WeightedSamplerTest, ReproducesMonaiTestValuesForFiveSamplesPerRankAndSeed123) {
  EXPECT_EQ(plus_one(all_draws(make(weights_of("linear", 5), 2, 0, 123, 5))),
            (Shards{{3, 1, 5, 1, 5}, {4, 2, 4, 2, 4}}));
}

struct SamplerGolden {
  int64_t n;
  int64_t w;
  PartitionMode mode;
  bool shuffle;
  uint64_t seed;
  uint64_t generator_seed;
  int64_t epoch;
  int64_t num_samples_per_rank;
  const char* weights;
  Shards shards;
};

// Printed by PyTorch 1.13 (Debian's python3-torch) running MONAI's __iter__ as
// emulated in oracle/make_weighted_golden.py:
//   cd tests/sampler/oracle && python make_weighted_golden.py   (with PyTorch 1.13; see its docstring)
// Covers shuffle on and off, every mode, seeds past 2^32, later epochs and
// num_samples_per_rank == 1 (PyTorch 1.13 draws it with the cumulative kernel).
const std::vector<SamplerGolden>& sampler_goldens() {
  static const std::vector<SamplerGolden> goldens = {
      {5, 2, PartitionMode::kPad, false, 0u, 0u, 0, -1, "linear", {{4, 4, 4}, {0, 3, 3}}},
      {5,
       2,
       PartitionMode::kPad,
       false,
       0u,
       123u,
       0,
       5,
       "linear",
       {{2, 0, 4, 0, 4}, {3, 1, 3, 1, 3}}},
      {10,
       3,
       PartitionMode::kPad,
       true,
       0u,
       7u,
       0,
       -1,
       "reciprocal",
       {{0, 0, 2, 0}, {1, 1, 4, 3}, {6, 6, 1, 1}}},
      {10,
       3,
       PartitionMode::kPad,
       true,
       0u,
       7u,
       1,
       -1,
       "reciprocal",
       {{4, 2, 5, 5}, {3, 0, 0, 0}, {7, 8, 1, 1}}},
      {10,
       3,
       PartitionMode::kPad,
       true,
       0u,
       7u,
       2,
       6,
       "reciprocal",
       {{0, 3, 0, 5, 8, 0}, {6, 8, 6, 7, 7, 4}, {1, 2, 1, 1, 1, 2}}},
      {21,
       4,
       PartitionMode::kUneven,
       true,
       42u,
       4294967301u,
       3,
       -1,
       "sparse",
       {{1, 4, 4, 4, 4, 4}, {19, 14, 7, 7, 19}, {13, 13, 17, 17, 13}, {8, 8, 11, 10, 8}}},
      {21, 4, PartitionMode::kDropLast, false, 0u, 99u, 0, 1, "reciprocal", {{4}, {9}, {14}, {15}}},
      {13, 2, PartitionMode::kPad, true, 2147483647u, 1u, 0, 1, "linear", {{12}, {3}}},
      {30,
       1,
       PartitionMode::kPad,
       false,
       0u,
       2024u,
       0,
       12,
       "sparse",
       {{8, 23, 11, 22, 28, 7, 13, 14, 14, 4, 4, 11}}},
      {64,
       8,
       PartitionMode::kPad,
       true,
       5u,
       31337u,
       4,
       16,
       "reciprocal",
       {{21, 7, 14, 7, 7, 14, 5, 5, 14, 21, 7, 7, 7, 14, 7, 5},
        {2, 0, 2, 63, 3, 0, 0, 0, 2, 2, 3, 0, 3, 0, 0, 0},
        {10, 44, 10, 47, 46, 10, 37, 9, 10, 10, 46, 44, 34, 10, 44, 9},
        {1, 15, 1, 18, 54, 1, 1, 1, 1, 1, 54, 15, 43, 1, 15, 1},
        {6, 4, 6, 4, 4, 6, 4, 45, 6, 6, 4, 4, 4, 6, 4, 25},
        {11, 29, 11, 29, 16, 11, 26, 48, 11, 11, 16, 29, 16, 11, 29, 33},
        {17, 53, 17, 53, 42, 40, 35, 38, 17, 17, 31, 53, 31, 40, 53, 13},
        {55, 8, 12, 8, 32, 12, 8, 8, 12, 12, 32, 8, 32, 12, 8, 22}}},
  };
  return goldens;
}

TEST(WeightedSamplerTest, EqualsMonaiOnTorch113ForEveryGoldenCase) {
  for (const SamplerGolden& g : sampler_goldens()) {
    const auto o = make(weights_of(g.weights, g.n), g.w, 0, g.generator_seed,
                        g.num_samples_per_rank, g.mode, g.shuffle, g.seed);
    EXPECT_EQ(all_draws(o, g.epoch), g.shards)
        << "n=" << g.n << " W=" << g.w << " mode=" << to_string(g.mode) << " shuffle=" << g.shuffle
        << " seed=" << g.seed << " generator_seed=" << g.generator_seed << " epoch=" << g.epoch
        << " num_samples_per_rank=" << g.num_samples_per_rank << " weights=" << g.weights;
  }
}

struct MultinomialGolden {
  int64_t n;
  const char* weights;
  uint32_t seed;
  Shards calls;  ///< draws of successive calls on one generator
};

// torch.multinomial(w, k, True, generator=g) itself, several calls on one
// torch.Generator().manual_seed(seed); same script as above (its last block).
TEST(WeightedMultinomialTest, EqualsTorch113MultinomialCallAfterCallOnOneGenerator) {
  const std::vector<MultinomialGolden> goldens = {
      {7, "reciprocal", 0u, {{6}, {3}, {1, 5, 2}}},
      {12, "sparse", 17u, {{4, 7, 2, 1, 8}, {2, 7}}},
      {1, "linear", 3u, {{0, 0, 0, 0}}},
      {40,
       "reciprocal",
       4294967295u,
       {{32, 5, 31, 3, 12, 5, 18, 1, 2},
        {0},
        {2,  2,  33, 1, 23, 1, 1,  1,  2, 16, 0,  28, 8,  26, 0, 28, 19, 16, 1,  4,
         27, 1,  4,  1, 0,  7, 19, 10, 3, 0,  8,  2,  0,  1,  0, 18, 0,  13, 1,  0,
         12, 11, 3,  7, 2,  1, 5,  22, 0, 17, 36, 4,  20, 23, 0, 14, 16, 1,  33, 3}}},
  };
  for (const MultinomialGolden& g : goldens) {
    const std::vector<double> w = weights_of(g.weights, g.n);
    Mt19937 gen(g.seed);
    for (size_t c = 0; c < g.calls.size(); ++c) {
      EXPECT_EQ(multinomial_with_replacement(w, static_cast<int64_t>(g.calls[c].size()), gen),
                g.calls[c])
          << "weights=" << g.weights << " seed=" << g.seed << " call " << c;
    }
  }
}

// PyTorch 1.13 sends num_samples == 1 through the same cumulative kernel, so a
// single draw is the first draw of a longer run (newer PyTorch releases use
// argmax(w / Exp(1)) there instead; see weighted_sampler.h).
TEST(WeightedMultinomialTest, OneSampleIsTheFirstDrawOfALongerRunAsInTorch113) {
  const std::vector<double> w = weights_of("reciprocal", 50);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Mt19937 one(seed);
    Mt19937 many(seed);
    ASSERT_EQ(multinomial_with_replacement(w, 1, one)[0],
              multinomial_with_replacement(w, 9, many)[0])
        << seed;
  }
}

TEST(WeightedMultinomialTest, UniformDoubleTakesTheLow53BitsOfTwoDrawsHighHalfFirst) {
  Mt19937 gen(5);
  Mt19937 raw(5);
  const uint64_t hi = raw();
  const uint64_t lo = raw();
  const double expected =
      static_cast<double>(((hi << 32) | lo) & ((uint64_t{1} << 53) - 1)) / 9007199254740992.0;
  EXPECT_EQ(uniform_double(gen), expected);
  // torch.Generator().manual_seed(5) then torch.rand(1, dtype=torch.double) on PyTorch 1.13.
  Mt19937 again(5);
  EXPECT_DOUBLE_EQ(uniform_double(again), 0.6420150066280941);
}

TEST(WeightedMultinomialTest, RejectsInvalidWeightsNamingTheValue) {
  const auto error = [](std::vector<double> w, int64_t k) -> std::string {
    Mt19937 gen(0);
    try {
      (void)multinomial_with_replacement(w, k, gen);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error({1, 2}, -1), HasSubstr("num_samples=-1 must be >= 0"));
  EXPECT_THAT(error({1, -0.25}, 1), HasSubstr("weights[1]=-0.25 must be >= 0"));
  EXPECT_THAT(error({std::numeric_limits<double>::quiet_NaN()}, 1),
              HasSubstr("weights[0]=nan must be finite"));
  EXPECT_THAT(error({0, 0}, 1), HasSubstr("all 2 weights are zero"));
  EXPECT_THAT(error({}, 1), HasSubstr("all 0 weights are zero"));
  EXPECT_THAT(error({1e308, 1e308}, 1), HasSubstr("sum to inf"));
  EXPECT_EQ(error({1, 2}, 0), "no error");
}

TEST(WeightedSamplerTest, ShuffleDefaultsToFalseAsMonai) {
  DistributedWeightedSamplerOptions o;
  EXPECT_FALSE(o.sampler.shuffle);
  EXPECT_EQ(o.num_samples_per_rank, -1);
  o.sampler.dataset_size = 5;
  o.sampler.num_replicas = 2;
  o.weights = weights_of("linear", 5);
  DistributedWeightedSampler s(o);
  s.set_epoch(3);
  EXPECT_THAT(s.shard().indices().to_vector(), ElementsAre(0, 2, 4));
}

TEST(WeightedSamplerTest, NumSamplesDefaultsToTheRanksShardSize) {
  const auto w = weights_of("linear", 5);
  EXPECT_EQ(DistributedWeightedSampler(make(w, 2, 0, 0, -1, PartitionMode::kUneven)).num_samples(),
            3);
  EXPECT_EQ(DistributedWeightedSampler(make(w, 2, 1, 0, -1, PartitionMode::kUneven)).num_samples(),
            2);
  EXPECT_EQ(
      DistributedWeightedSampler(make(w, 2, 1, 0, -1, PartitionMode::kUneven)).indices().size(),
      2u);
  DistributedWeightedSampler more(make(w, 2, 1, 0, 7));
  EXPECT_EQ(more.num_samples(), 7);
  EXPECT_EQ(more.indices().size(), 7u);
}

TEST(WeightedSamplerTest, ZeroSamplesPerRankYieldsNothing) {
  EXPECT_TRUE(
      DistributedWeightedSampler(make(weights_of("linear", 5), 2, 0, 0, 0)).indices().empty());
  // An empty dataset, or an empty drop_last shard, with the default count.
  EXPECT_TRUE(DistributedWeightedSampler(make({}, 3, 2, 0)).indices().empty());
  EXPECT_TRUE(DistributedWeightedSampler(
                  make(weights_of("linear", 3), 4, 1, 0, -1, PartitionMode::kDropLast))
                  .indices()
                  .empty());
}

TEST(WeightedSamplerTest, SameSeedAndEpochGiveTheSameDraws) {
  const auto o = make(weights_of("reciprocal", 100), 3, 1, 77, 40, PartitionMode::kPad, true, 9);
  DistributedWeightedSampler a(o);
  DistributedWeightedSampler b(o);
  a.set_epoch(5);
  b.set_epoch(5);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), a.indices());
  const auto e5 = a.indices();
  a.set_epoch(6);
  (void)a.indices();
  a.set_epoch(5);
  EXPECT_EQ(a.indices(), e5);
}

TEST(WeightedSamplerTest, DifferentEpochsGiveDifferentDraws) {
  for (bool shuffle : {false, true}) {
    DistributedWeightedSampler s(
        make(weights_of("reciprocal", 100), 2, 0, 77, 50, PartitionMode::kPad, shuffle));
    const auto e0 = s.indices();
    s.set_epoch(1);
    EXPECT_EQ(s.epoch(), 1);
    EXPECT_NE(s.indices(), e0) << "shuffle=" << shuffle;
  }
}

TEST(WeightedSamplerTest, EpochDrawsWithAFreshGeneratorSeededGeneratorSeedPlusEpoch) {
  const auto w = weights_of("sparse", 40);
  DistributedWeightedSampler later(make(w, 2, 1, 10, 30));
  later.set_epoch(3);
  EXPECT_EQ(later.indices(), DistributedWeightedSampler(make(w, 2, 1, 13, 30)).indices());
  // torch.Generator().manual_seed keeps the low 32 bits of the seed.
  EXPECT_EQ(DistributedWeightedSampler(make(w, 2, 1, (1ull << 32) + 5, 30)).indices(),
            DistributedWeightedSampler(make(w, 2, 1, 5, 30)).indices());
}

// Pearson's chi-square goodness of fit of 200,000 draws over 10 categories with
// weights 1..10, against the 0.999 quantile of chi-square with 9 degrees of
// freedom (27.877). The seed is fixed, so the statistic is one fixed number
// and the test is deterministic; it would fail for a sampler that ignored or
// shifted the weights.
TEST(WeightedSamplerTest, DrawFrequenciesFollowTheWeights) {
  const auto w = weights_of("linear", 10);
  constexpr int64_t kDraws = 200000;
  const auto draws = DistributedWeightedSampler(make(w, 1, 0, 20240601, kDraws)).indices();
  ASSERT_EQ(static_cast<int64_t>(draws.size()), kDraws);
  std::vector<int64_t> count(w.size(), 0);
  for (const int64_t i : draws) ++count[static_cast<size_t>(i)];
  double chi2 = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double expected = static_cast<double>(kDraws) * w[i] / 55.0;
    const double d = static_cast<double>(count[i]) - expected;
    chi2 += d * d / expected;
  }
  EXPECT_LT(chi2, 27.877);
}

TEST(WeightedSamplerTest, NeverDrawsZeroWeightSamples) {
  const auto w = weights_of("sparse", 60);  // every third weight is zero
  for (int64_t rank = 0; rank < 4; ++rank) {
    DistributedWeightedSampler s(make(w, 4, rank, 3, 5000, PartitionMode::kPad, true, 11));
    for (int64_t epoch = 0; epoch < 5; ++epoch) {
      s.set_epoch(epoch);
      for (const int64_t i : s.indices())
        ASSERT_GT(w[static_cast<size_t>(i)], 0.0) << "index " << i;
    }
  }
}

TEST(WeightedSamplerTest, RejectsBadOptionsNamingTheValue) {
  const auto w = weights_of("linear", 5);
  auto short_weights = make(w, 2, 0, 0);
  short_weights.weights.pop_back();
  EXPECT_THAT(error_of(short_weights), HasSubstr("weights.size()=4 must equal dataset_size=5"));
  EXPECT_THAT(error_of(make({1, 2, -0.5, 4}, 2, 0, 0)), HasSubstr("weights[2]=-0.5 must be >= 0"));
  EXPECT_THAT(error_of(make({1, std::numeric_limits<double>::quiet_NaN()}, 1, 0, 0)),
              HasSubstr("weights[1]=nan must be finite"));
  EXPECT_THAT(error_of(make({1, 2, 3, std::numeric_limits<double>::infinity()}, 1, 0, 0)),
              HasSubstr("weights[3]=inf must be finite"));
  EXPECT_THAT(error_of(make({0, 0, 0}, 1, 0, 0)), HasSubstr("all 3 weights are zero"));
  EXPECT_THAT(error_of(make({1e308, 1e308}, 1, 0, 0)), HasSubstr("weights sum to inf"));
  EXPECT_THAT(error_of(make(w, 2, 0, 0, -2)),
              HasSubstr("num_samples_per_rank=-2 must be >= 0, or -1"));
  EXPECT_THAT(error_of(make(weights_of("linear", 3), 4, 1, 0, 2, PartitionMode::kDropLast)),
              HasSubstr("num_samples_per_rank=2 but rank=1 reads no samples"));
  EXPECT_THAT(error_of(make(w, 4, 4, 0)), HasSubstr("rank=4 must be in [0, num_replicas=4)"));
}

// torch.multinomial raises on this rank too, but cannot say which rank or epoch.
TEST(WeightedSamplerTest, RankWhoseShardWeightsAreAllZeroFailsAtIndicesNamingRankAndEpoch) {
  const auto o = make({0, 1, 0, 1}, 2, 0, 0);  // rank 0 reads indices 0 and 2
  EXPECT_THAT(indices_error_of(o, 0),
              HasSubstr("rank=0 epoch=0: all 2 weights of this rank's shard are zero"));
  EXPECT_THAT(indices_error_of(o, 3), HasSubstr("rank=0 epoch=3"));
  auto rank1 = o;
  rank1.sampler.rank = 1;
  EXPECT_EQ(indices_error_of(rank1, 0), "no error");
}

}  // namespace
}  // namespace volshard
