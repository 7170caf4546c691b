#include "volshard/datasets/cache.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "transforms/augmentation_test_util.h"
#include "volshard/core/large_blocks.h"
#include "volshard/core/log.h"
#include "volshard/datasets/volume.h"
#include "volume_io/nifti_test_util.h"

namespace volshard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using namespace volshard::testing;

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
  // image and label, and one foreground index (the background is not listed)
  EXPECT_EQ(cache.cached_bytes(), 10 * (2 * 64 * 4 + 1 * 4));
  const Sample a = cache.get(7), b = cache.get(7);
  EXPECT_EQ(calls.load(), 10);
  EXPECT_EQ(a.image.data_ptr(), b.image.data_ptr());  // shared, not copied
  EXPECT_EQ(a.indices.get(), b.indices.get());
  EXPECT_EQ(a.image[0][0][0][0].item<float>(), 7.0f);
}

// CacheOptions::device (here "meta", standing in for a GPU): the cached
// tensors live on the device, counted in the budget; the label indices the
// crops read stay in host memory; an item past the budget is prepared on the
// host when asked for (the loader moves it).
TEST(SampleCacheTest, KeepsItsTensorsOnTheDeviceAndTheLabelIndicesOnTheHost) {
  CacheOptions o;
  o.device = c10::Device(c10::kMeta);
  o.max_bytes = 3 * (2 * 64 * 4 + 4);
  SampleCache cache(prepared, 5, o);
  EXPECT_EQ(cache.cached_items(), 3);
  EXPECT_EQ(cache.cached_bytes(), 3 * (2 * 64 * 4 + 4));
  const Sample cached = cache.get(1);
  EXPECT_TRUE(cached.image.is_meta() && cached.label.is_meta());
  ASSERT_NE(cached.indices, nullptr);
  EXPECT_EQ(cached.indices->foreground, std::vector<int32_t>{21});
  EXPECT_TRUE(cache.get(4).image.is_cpu());
}

// With a byte budget the cache keeps the first items that fit, as with one
// thread, whatever order the fill's threads finish in: here item 3 is made
// to finish before item 2 (item 2 waits for it), which used to cache items
// 0, 1 and 3 and leave 2 to be prepared on every get().
TEST(SampleCacheTest, ABudgetKeepsTheFirstItemsWhateverOrderTheFillFinishesIn) {
  std::mutex mutex;
  std::condition_variable third;
  bool third_done = false;
  const SampleSource out_of_order = [&](int64_t i) {
    if (i == 2) {  // bounded: with one thread (none could start) item 3 comes after
      std::unique_lock<std::mutex> lock(mutex);
      third.wait_for(lock, std::chrono::seconds(10), [&] { return third_done; });
    }
    Sample s = prepared(i);
    if (i == 3) {
      {
        const std::lock_guard<std::mutex> lock(mutex);
        third_done = true;
      }
      third.notify_all();
    }
    return s;
  };
  CacheOptions o;
  o.threads = 2;
  o.max_bytes = 3 * (2 * 64 * 4 + 4);
  const SampleCache cache(out_of_order, 6, o);
  EXPECT_EQ(cache.cached_items(), 3);
  EXPECT_EQ(cache.cached_bytes(), 3 * (2 * 64 * 4 + 4));
  const int64_t filled = cache.prepared();
  for (int64_t i = 0; i < 3; ++i) (void)cache.get(i);
  EXPECT_EQ(cache.prepared(), filled) << "items 0, 1 and 2 are the cached ones";
  (void)cache.get(3);
  EXPECT_EQ(cache.prepared(), filled + 1) << "item 3 is past the budget";
}

// A fill whose prepare allocates and releases large blocks (as loading a CT
// volume does) leaves none kept for reuse once every item is cached: nothing
// will load again. With items left to load on demand, the blocks stay for them.
TEST(SampleCacheTest, GivesTheFillsReleasedBlocksBackWhenEveryItemIsCached) {
  const bool was = large_block_cache_enabled();
  enable_large_block_cache(true);
  constexpr size_t kScratch = size_t{32} << 20;
  const SampleSource loading = [](int64_t i) {
    void* scratch = allocate_bytes(kScratch);  // a file buffer, a float image
    release_bytes(scratch, kScratch);
    return prepared(i);
  };
  CacheOptions o;
  o.threads = 2;
  {
    SampleCache all(loading, 4, o);
    EXPECT_EQ(all.cached_items(), 4);
    EXPECT_EQ(large_block_stats().free_bytes, 0);
  }
  o.max_bytes = 2 * (2 * 64 * 4 + 4);
  {
    SampleCache some(loading, 4, o);
    EXPECT_EQ(some.cached_items(), 2);
    EXPECT_GE(large_block_stats().free_bytes, static_cast<int64_t>(kScratch));
  }
  enable_large_block_cache(was);
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
  budget.max_bytes = 3 * 516 + 100;
  SampleCache by_bytes(counting, 10, budget);
  EXPECT_EQ(by_bytes.cached_items(), 3);
  EXPECT_LE(by_bytes.cached_bytes(), budget.max_bytes);
}

TEST(SampleCacheTest, ReportsErrorsAndBadOptions) {
  EXPECT_THROW(
      SampleCache([](int64_t) -> Sample { throw std::runtime_error("img3: truncated"); }, 4, {}),
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
  const Compose pipeline = test_augmentation({2, 2, 2}, 2);
  DataLoader cached(cache.source(), pipeline, o), direct(prepared, pipeline, o);
  cached.start_epoch({5, 0, 3, 1}, 2);
  direct.start_epoch({5, 0, 3, 1}, 2);
  while (auto a = cached.next()) {
    auto b = direct.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(at::equal(a->image, b->image));
  }
}

// ---- Persistent cache (cache_dir) --------------------------------------------

// Warnings sent through volshard::warn while it lives.
class WarningCapture {
 public:
  WarningCapture() {
    previous_ = set_warning_handler([this](const std::string& m) {
      const std::lock_guard<std::mutex> lock(mutex_);
      messages_.push_back(m);
    });
  }
  ~WarningCapture() { set_warning_handler(previous_); }
  std::vector<std::string> messages() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
  WarningHandler previous_;
};

Affine identity() {
  Affine a{};
  for (int d = 0; d < 4; ++d) a[static_cast<size_t>(d)][static_cast<size_t>(d)] = 1;
  return a;
}

// A small folder dataset: img{i}.nii.gz holds values that depend on i and
// `variant`, seg{i}.nii.gz a box of foreground.
struct FolderData {
  std::string dir;
  std::vector<ImageLabelPair> pairs;
};

void write_item(const std::string& image, const std::string& label, int64_t i, int64_t variant = 0,
                std::array<int64_t, 3> shape = {6, 5, 4}) {
  // variant 1 squares the values: still different after scale_intensity.
  const at::Tensor ramp = at::arange(shape[0] * shape[1] * shape[2], at::kFloat)
                              .reshape({1, shape[0], shape[1], shape[2]})
                              .mul(static_cast<double>(i + 1));
  const at::Tensor img = variant == 0 ? ramp : ramp.pow(2);
  at::Tensor seg = at::zeros({1, shape[0], shape[1], shape[2]}, at::kInt);
  seg.narrow(1, 1, 2).narrow(2, 0, 1 + i % 3).fill_(1 + i % 2);
  write_volume(image, img, identity());
  write_volume(label, seg, identity());
}

// Under `root`, the test's test_dir() (a second test_dir() call would empty it).
FolderData folder_dataset(const std::string& root, int64_t n,
                          std::array<int64_t, 3> shape = {6, 5, 4}) {
  FolderData d{root + "/data", {}};
  fs::create_directories(d.dir);
  for (int64_t i = 0; i < n; ++i) {
    write_item(d.dir + "/img" + std::to_string(i) + ".nii.gz",
               d.dir + "/seg" + std::to_string(i) + ".nii.gz", i, 0, shape);
  }
  d.pairs = pairs_from_folder(d.dir);
  return d;
}

// The README's prepare step, counting its calls.
SampleSource counting_prepare(const std::vector<ImageLabelPair>& pairs, std::atomic<int>& calls) {
  return [&pairs, &calls](int64_t i) {
    ++calls;
    Sample s;
    const auto& p = pairs[static_cast<size_t>(i)];
    s.image = scale_intensity(read_volume_as_float(p.image).data);
    s.label = read_volume_as_float(p.label).data;
    s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
    s.meta.source = p.image;
    return s;
  };
}

CacheOptions persistent(const std::string& cache_dir, const std::vector<ImageLabelPair>& pairs,
                        const std::string& config_key = "scale_intensity(0,1) label_indices v1") {
  CacheOptions o;
  o.cache_dir = cache_dir;
  o.config_key = config_key;
  o.item_files = files_of(pairs);
  o.threads = 2;
  return o;
}

void expect_same_tensor(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_EQ(a.scalar_type(), b.scalar_type()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  EXPECT_EQ(std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()), 0)
      << what << " differs in its bytes";
}

void expect_same_sample(const Sample& a, const Sample& b) {
  expect_same_tensor(a.image, b.image, "image");
  expect_same_tensor(a.label, b.label, "label");
  ASSERT_EQ(a.indices == nullptr, b.indices == nullptr);
  if (a.indices) {
    EXPECT_EQ(a.indices->foreground, b.indices->foreground);
    EXPECT_EQ(a.indices->background, b.indices->background);
    EXPECT_EQ(a.indices->voxels, b.indices->voxels);
  }
  const SampleMeta &x = a.meta, &y = b.meta;
  EXPECT_EQ(x.index, y.index);
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.patch_index, y.patch_index);
  EXPECT_EQ(x.cropped, y.cropped);
  EXPECT_EQ(x.foreground_centre, y.foreground_centre);
  EXPECT_EQ(x.crop_centre, y.crop_centre);
  EXPECT_EQ(x.crop_start, y.crop_start);
  EXPECT_EQ(x.source_shape, y.source_shape);
  EXPECT_EQ(x.rot90_k, y.rot90_k);
  EXPECT_EQ(x.rot90_axes, y.rot90_axes);
  EXPECT_EQ(x.flipped, y.flipped);
}

std::vector<std::string> entries_in(const std::string& cache_dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(cache_dir)) {
    if (e.path().extension() == ".vscache") out.push_back(e.path().string());
  }
  return out;
}

TEST(PersistentCacheTest, SecondRunLoadsEveryItemFromDiskBitForBit) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 5);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  const SampleCache first(prepare, 5, persistent(cache_dir, data.pairs));
  EXPECT_EQ(first.prepared(), 5);
  EXPECT_EQ(first.loaded_from_disk(), 0);
  EXPECT_THAT(entries_in(cache_dir), SizeIs(5));

  calls = 0;
  WarningCapture warnings;
  const SampleCache second(prepare, 5, persistent(cache_dir, data.pairs));
  EXPECT_EQ(second.loaded_from_disk(), 5);
  EXPECT_EQ(second.prepared(), 0);
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(second.cached_bytes(), first.cached_bytes());
  for (int64_t i = 0; i < 5; ++i) {
    SCOPED_TRACE("item " + std::to_string(i));
    expect_same_sample(second.get(i), first.get(i));
    expect_same_sample(second.get(i), prepare(i));
  }
  EXPECT_THAT(warnings.messages(), SizeIs(0));
  // Entries live where entry_path says, keyed by contents, not by index.
  EXPECT_TRUE(fs::exists(second.entry_path(3)));
  EXPECT_NE(second.entry_path(3), second.entry_path(4));
}

TEST(PersistentCacheTest, WarmAndColdCachesFeedTheLoaderTheSameBatches) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 4, {10, 9, 8});
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleCache cold(counting_prepare(data.pairs, calls), 4, persistent(cache_dir, data.pairs));
  const SampleCache warm(counting_prepare(data.pairs, calls), 4, persistent(cache_dir, data.pairs));
  ASSERT_EQ(warm.loaded_from_disk(), 4);
  LoaderOptions o;
  o.workers = 2;
  const Compose pipeline = test_augmentation({4, 4, 4}, 2);
  DataLoader a(cold.source(), pipeline, o), b(warm.source(), pipeline, o);
  a.start_epoch({3, 1, 0, 2}, 5);
  b.start_epoch({3, 1, 0, 2}, 5);
  int batches = 0;
  while (auto x = a.next()) {
    auto y = b.next();
    ASSERT_TRUE(y.has_value());
    expect_same_tensor(x->image, y->image, "batch image");
    expect_same_tensor(x->label, y->label, "batch label");
    ++batches;
  }
  EXPECT_EQ(batches, 2);
}

TEST(PersistentCacheTest, RebuildsOnlyTheItemWhoseSourceFileChangedAndDeletesNothing) {
  const std::string root = test_dir();
  FolderData data = folder_dataset(root, 4);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  const SampleCache first(prepare, 4, persistent(cache_dir, data.pairs));
  const std::string old_entry = first.entry_path(2);
  write_item(data.pairs[2].image, data.pairs[2].label, 2, /*variant=*/1);

  WarningCapture warnings;
  const SampleCache second(prepare, 4, persistent(cache_dir, data.pairs));
  EXPECT_EQ(second.loaded_from_disk(), 3);
  EXPECT_EQ(second.prepared(), 1);
  EXPECT_NE(second.entry_path(2), old_entry);
  expect_same_sample(second.get(2), prepare(2));
  EXPECT_FALSE(
      at::equal(second.get(2).image, first.get(2).image));  // the new contents, not the old entry
  EXPECT_TRUE(fs::exists(old_entry));                       // a stale entry is left alone
  EXPECT_THAT(entries_in(cache_dir), SizeIs(5));
  EXPECT_THAT(warnings.messages(), SizeIs(0));  // stale is not corrupt: simply not found
}

TEST(PersistentCacheTest, RebuildsEveryItemWhenTheConfigKeyChanges) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 3);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  const SampleCache a(prepare, 3, persistent(cache_dir, data.pairs, "scale_intensity(0,1) v1"));
  const SampleCache b(prepare, 3, persistent(cache_dir, data.pairs, "scale_intensity(-1,1) v1"));
  EXPECT_EQ(b.loaded_from_disk(), 0);
  EXPECT_EQ(b.prepared(), 3);
  EXPECT_THAT(entries_in(cache_dir), SizeIs(6));
  const SampleCache again(prepare, 3, persistent(cache_dir, data.pairs, "scale_intensity(0,1) v1"));
  EXPECT_EQ(again.loaded_from_disk(), 3);
}

// Flips one byte of the file in place (no truncation, no new file).
void flip_byte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const int byte = f.get();
  ASSERT_NE(byte, EOF) << path << " has no byte " << offset;
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(byte ^ 0x20));
  ASSERT_TRUE(f.good());
}

TEST(PersistentCacheTest, RefusesACorruptEntryWithAWarningAndRebuildsIt) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 3);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  const SampleCache first(prepare, 3, persistent(cache_dir, data.pairs));
  const std::string entry = first.entry_path(1);
  const auto original = read_bytes(entry);
  // A voxel of the image payload: the image bytes sit in the middle of the file.
  flip_byte(entry, original.size() / 2);

  WarningCapture warnings;
  const SampleCache second(prepare, 3, persistent(cache_dir, data.pairs));
  EXPECT_EQ(second.rejected_entries(), 1);
  EXPECT_EQ(second.loaded_from_disk(), 2);
  EXPECT_EQ(second.prepared(), 1);
  ASSERT_THAT(warnings.messages(), SizeIs(1));
  EXPECT_THAT(warnings.messages()[0], HasSubstr(entry));
  EXPECT_THAT(warnings.messages()[0], HasSubstr("checksum mismatch"));
  EXPECT_THAT(warnings.messages()[0], HasSubstr("item 1"));
  expect_same_sample(second.get(1), prepare(1));
  EXPECT_EQ(read_bytes(entry), original);  // rewritten, byte for byte as before
  const SampleCache third(prepare, 3, persistent(cache_dir, data.pairs));
  EXPECT_EQ(third.loaded_from_disk(), 3);
}

TEST(PersistentCacheTest, RefusesATruncatedEntryWithAWarningAndRebuildsIt) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 2);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  const SampleCache first(prepare, 2, persistent(cache_dir, data.pairs));
  const std::string entry = first.entry_path(0);
  const auto original = read_bytes(entry);
  for (const size_t cut : {size_t{0}, size_t{30}, size_t{200}, original.size() - 1}) {
    SCOPED_TRACE("kept " + std::to_string(cut) + " of " + std::to_string(original.size()) +
                 " bytes");
    fs::resize_file(entry, cut);
    WarningCapture warnings;
    const SampleCache second(prepare, 2, persistent(cache_dir, data.pairs));
    EXPECT_EQ(second.rejected_entries(), 1);
    EXPECT_EQ(second.prepared(), 1);
    ASSERT_THAT(warnings.messages(), SizeIs(1));
    EXPECT_THAT(warnings.messages()[0], HasSubstr(entry + ": truncated"));
    expect_same_sample(second.get(0), prepare(0));
    EXPECT_EQ(read_bytes(entry), original);
  }
}

TEST(PersistentCacheTest, RefusesAnEntryWithAnyOneByteChanged) {
  // Every byte is checksummed or compared: header, meta, image, label, indices.
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 1, {3, 3, 2});
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  CacheOptions o = persistent(cache_dir, data.pairs);
  o.threads = 1;
  const SampleCache first(prepare, 1, o);
  const std::string entry = first.entry_path(0);
  const auto original = read_bytes(entry);
  ASSERT_GT(original.size(), 300u);
  WarningCapture warnings;
  for (size_t at = 0; at < original.size(); ++at) {
    flip_byte(entry, at);
    const SampleCache cache(prepare, 1, o);
    ASSERT_EQ(cache.rejected_entries(), 1) << "a change at byte " << at << " went unnoticed";
    ASSERT_EQ(cache.loaded_from_disk(), 0);
    ASSERT_EQ(read_bytes(entry), original);
  }
  EXPECT_THAT(warnings.messages(), SizeIs(original.size()));
}

TEST(PersistentCacheTest, RoundTripsEveryDtypeAndMetaField) {
  const std::string dir = test_dir();
  write_bytes(dir + "/a.bin", {1, 2, 3});
  Sample odd;
  odd.image = at::arange(24, at::kDouble).reshape({2, 3, 4, 1}).transpose(1, 2);  // not contiguous
  odd.label = at::arange(6, at::kByte).reshape({1, 3, 2, 1});
  odd.meta =
      SampleMeta{7,      "somewhere/a.bin",  3, true, true, {1, 2, 3}, {4, 5, 6}, {7, 8, 9}, 2,
                 {0, 2}, {true, false, true}};
  CacheOptions o;
  o.cache_dir = dir + "/cache";
  o.item_files = [&](int64_t) { return std::vector<std::string>{dir + "/a.bin"}; };
  const SampleSource prepare = [&](int64_t) { return odd; };
  const SampleCache first(prepare, 1, o);
  const SampleCache second(prepare, 1, o);
  ASSERT_EQ(second.loaded_from_disk(), 1);
  const Sample back = second.get(0);
  expect_same_tensor(back.image, odd.image, "image");
  expect_same_tensor(back.label, odd.label, "label");
  EXPECT_EQ(back.indices, nullptr);
  EXPECT_TRUE(back.image.is_contiguous());
  Sample expected = odd;
  expected.meta.index = 7;  // not the writer's index (0), so kept as stored
  expect_same_sample(back, expected);
}

TEST(PersistentCacheTest, ItemsWithIdenticalFilesShareAnEntryButKeepTheirOwnSource) {
  const std::string dir = test_dir();
  write_item(dir + "/img0.nii.gz", dir + "/seg0.nii.gz", 0);
  fs::copy_file(dir + "/img0.nii.gz", dir + "/img1.nii.gz");
  fs::copy_file(dir + "/seg0.nii.gz", dir + "/seg1.nii.gz");
  const auto pairs = pairs_from_folder(dir);
  std::atomic<int> calls{0};
  CacheOptions o = persistent(dir + "/cache", pairs);
  o.threads = 1;
  const SampleCache cache(counting_prepare(pairs, calls), 2, o);
  EXPECT_EQ(cache.prepared(), 1);
  EXPECT_EQ(cache.loaded_from_disk(), 1);
  EXPECT_EQ(cache.get(0).meta.source, pairs[0].image);
  EXPECT_EQ(cache.get(1).meta.source, pairs[1].image);
  EXPECT_TRUE(at::equal(cache.get(0).image, cache.get(1).image));
}

TEST(PersistentCacheTest, ItemsBeyondTheBudgetAreReadFromDiskOnGet) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 3);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  CacheOptions o = persistent(cache_dir, data.pairs);
  o.cache_rate = 0;  // MONAI's PersistentDataset: nothing held in memory
  const SampleCache a(counting_prepare(data.pairs, calls), 3, o);
  EXPECT_EQ(a.cached_items(), 0);
  EXPECT_EQ(a.prepared(), 0);
  const Sample fresh = a.get(2);
  EXPECT_EQ(a.prepared(), 1);
  const Sample loaded = a.get(2);
  EXPECT_EQ(a.loaded_from_disk(), 1);
  expect_same_sample(loaded, fresh);
}

TEST(PersistentCacheTest, AnEntryThatCannotBeWrittenIsAWarningAndTheItemStillServes) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 2);
  const std::string cache_dir = root + "/cache";
  std::atomic<int> calls{0};
  const SampleSource prepare = counting_prepare(data.pairs, calls);
  const SampleCache first(prepare, 2, persistent(cache_dir, data.pairs));
  // A folder where item 1's entry should be: neither readable as an entry nor replaceable.
  const std::string entry = first.entry_path(1);
  fs::remove(entry);
  fs::create_directories(entry + "/blocker");
  WarningCapture warnings;
  const SampleCache second(prepare, 2, persistent(cache_dir, data.pairs));
  EXPECT_EQ(second.loaded_from_disk(), 1);
  EXPECT_EQ(second.prepared(), 1);
  expect_same_sample(second.get(1), prepare(1));
  const auto messages = warnings.messages();
  ASSERT_THAT(messages, SizeIs(2));
  EXPECT_THAT(messages[0], HasSubstr(entry + ": not a regular file"));
  EXPECT_THAT(messages[1], HasSubstr("cannot write the entry of item 1"));
  EXPECT_THAT(messages[1], HasSubstr(entry));
}

TEST(PersistentCacheTest, NamesACacheDirItCannotCreateAndNeedsItemFiles) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 1);
  write_bytes(data.dir + "/plain_file", {1});
  const std::string bad = data.dir + "/plain_file/cache";
  std::atomic<int> calls{0};
  try {
    SampleCache(counting_prepare(data.pairs, calls), 1, persistent(bad, data.pairs));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cache_dir=" + bad + ": cannot create the folder"));
  }
  CacheOptions no_files;
  no_files.cache_dir = data.dir + "/cache";
  try {
    SampleCache(counting_prepare(data.pairs, calls), 1, no_files);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs item_files"));
  }
  EXPECT_EQ(calls.load(), 0);
  const SampleCache memory_only(counting_prepare(data.pairs, calls), 1, {});
  EXPECT_THROW((void)memory_only.entry_path(0), std::logic_error);
}

TEST(PersistentCacheTest, AMissingSourceFileIsAnErrorNamingIt) {
  const std::string root = test_dir();
  const FolderData data = folder_dataset(root, 2);
  fs::remove(data.pairs[1].label);
  std::atomic<int> calls{0};
  try {
    SampleCache(counting_prepare(data.pairs, calls), 2, persistent(root + "/cache", data.pairs));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(data.pairs[1].label + ": cannot open"));
  }
}

}  // namespace
}  // namespace volshard
