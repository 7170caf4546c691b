#include "volshard/datasets/cache.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

namespace volshard {
namespace {

using ::testing::HasSubstr;

Sample prepared(int64_t index) {
  Sample s;
  s.image = at::full({1, 4, 4, 4}, static_cast<float>(index));
  s.label = at::zeros({1, 4, 4, 4});
  s.label[0][1][1][1] = 1.0;
  s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  return s;
}

TEST(SampleCacheTest, PreparesEachCachedItemOnceAndSharesIt) {
  std::atomic<int> calls{0};
  CacheOptions o;
  o.threads = 3;
  SampleCache cache(
      [&](int64_t i) {
        ++calls;
        return prepared(i);
      },
      10, o);
  EXPECT_EQ(calls.load(), 10);
  EXPECT_EQ(cache.cached_items(), 10);
  EXPECT_EQ(cache.cached_bytes(), 10 * (2 * 64 * 4 + 64 * 4));
  const Sample a = cache.get(7), b = cache.get(7);
  EXPECT_EQ(calls.load(), 10);
  EXPECT_EQ(a.image.data_ptr(), b.image.data_ptr());  // shared, not copied
  EXPECT_EQ(a.indices.get(), b.indices.get());
  EXPECT_EQ(a.image[0][0][0][0].item<float>(), 7.0f);
}

TEST(SampleCacheTest, KeepsToTheRateAndTheByteBudget) {
  std::atomic<int> calls{0};
  const SampleSource counting = [&](int64_t i) {
    ++calls;
    return prepared(i);
  };
  CacheOptions half;
  half.cache_rate = 0.5;
  SampleCache by_rate(counting, 10, half);
  EXPECT_EQ(by_rate.cached_items(), 5);
  calls = 0;
  (void)by_rate.get(9);  // not cached: prepared on demand
  EXPECT_EQ(calls.load(), 1);
  CacheOptions budget;
  budget.threads = 1;
  budget.max_bytes = 3 * 768 + 100;
  SampleCache by_bytes(counting, 10, budget);
  EXPECT_EQ(by_bytes.cached_items(), 3);
  EXPECT_LE(by_bytes.cached_bytes(), budget.max_bytes);
}

TEST(SampleCacheTest, ReportsErrorsAndBadOptions) {
  EXPECT_THROW(SampleCache([](int64_t) -> Sample { throw std::runtime_error("img3: truncated"); }, 4, {}),
               std::runtime_error);
  CacheOptions bad;
  bad.cache_rate = 1.5;
  try {
    SampleCache(prepared, 4, bad);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("cache_rate=1.5"));
  }
  SampleCache cache(prepared, 2, {});
  EXPECT_THROW((void)cache.get(2), std::out_of_range);
}

TEST(SampleCacheTest, FeedsTheLoaderTheSameBatchesAsThePreparingSource) {
  SampleCache cache(prepared, 6, {});
  LoaderOptions o;
  o.workers = 2;
  const Compose pipeline = tutorial_augmentation({2, 2, 2}, 2);
  DataLoader cached(cache.source(), pipeline, o), direct(prepared, pipeline, o);
  cached.start_epoch({5, 0, 3, 1}, 2);
  direct.start_epoch({5, 0, 3, 1}, 2);
  while (auto a = cached.next()) {
    auto b = direct.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(at::equal(a->image, b->image));
  }
}

}  // namespace
}  // namespace volshard
