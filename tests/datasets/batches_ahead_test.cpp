// batches_ahead.cpp: the loader's batches on the training device one step ahead.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "volshard/datasets/batches_ahead.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

// Volume i of an edge^3 source: image all i, label zeros; `loaded` counts the calls.
SampleSource constant_volumes(int64_t edge, std::atomic<int64_t>* loaded = nullptr) {
  return [edge, loaded](int64_t i) {
    if (loaded) ++*loaded;
    Sample s;
    s.image = at::full({1, edge, edge, edge}, static_cast<float>(i));
    s.label = at::zeros({1, edge, edge, edge});
    return s;
  };
}

// The loader's batches a step ahead: on the CPU each comes back as the loader
// made it, in order, and the next one has already been taken from the loader
// (its source called) when a batch is handed out; a new epoch drops it.
TEST(BatchesAheadTest, HandsOutTheLoadersBatchesInOrderWithTheNextOneAlreadyTaken) {
  std::atomic<int64_t> loaded{0};
  const SampleSource source = constant_volumes(4, &loaded);
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 0;  // the source runs when the loader's next() is called
  o.pin_memory = PinMemory::kOff;
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  BatchesAhead ahead(loader, c10::Device(c10::kCPU));
  EXPECT_FALSE(ahead.side_stream());
  for (const int64_t epoch : {0, 1}) {
    loaded = 0;
    ahead.start_epoch({5, 2, 9}, epoch);
    std::vector<float> seen;
    while (auto b = ahead.next()) {
      seen.push_back(b->image.flatten()[0].item<float>());
      EXPECT_TRUE(b->image.is_same(b->host.image)) << "on the CPU nothing is copied";
      EXPECT_EQ(loaded.load(), std::min<int64_t>(static_cast<int64_t>(seen.size()) + 1, 3));
    }
    EXPECT_EQ(seen, (std::vector<float>{5, 2, 9}));
  }
  ahead.start_epoch({1, 3}, 2);
  ASSERT_TRUE(ahead.next().has_value());
  ahead.start_epoch({4}, 3);  // the batch of index 3, taken ahead, is dropped
  const auto b = ahead.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->image.flatten()[0].item<float>(), 4.0f);
  EXPECT_FALSE(ahead.next().has_value());
}

// The data wait a step reports is the time its own next() spent in the
// loader: the first call of an epoch takes two batches (this one and the one
// ahead) and reports both waits; later calls the one batch they take ahead.
// Summed over the epoch it is every batch's wait once. (It was each batch's
// own wait, spent a step earlier: a step could report more waiting than it
// lasted, 1.87 of its time at an epoch's start on the H100.)
TEST(BatchesAheadTest, EachCallReportsTheWaitItSpentInTheLoader) {
  const SampleSource source = constant_volumes(4);
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 0;  // each batch made inside the loader's next(): every wait is > 0
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  BatchesAhead ahead(loader, c10::Device(c10::kCPU));
  ahead.start_epoch({0, 1, 2, 3}, 0);
  std::vector<double> waited, own;
  while (auto b = ahead.next()) {
    waited.push_back(b->waited_seconds);
    own.push_back(b->host.wait_seconds);
  }
  ASSERT_EQ(waited.size(), 4u);
  for (const double w : own) EXPECT_GT(w, 0.0);
  EXPECT_DOUBLE_EQ(waited[0], own[0] + own[1]);
  EXPECT_DOUBLE_EQ(waited[1], own[2]);
  EXPECT_DOUBLE_EQ(waited[2], own[3]);
  EXPECT_DOUBLE_EQ(waited[3], 0.0);  // nothing left to take ahead
}

// The host step (the Python Loader's user transform) runs on each batch before
// its copy, ahead with it; its error is that batch's: the batch before it is
// handed out whole, and the next call raises it.
TEST(BatchesAheadTest, TheHostStepChangesEachBatchBeforeItsCopyAndItsErrorIsThatBatchs) {
  const SampleSource source = constant_volumes(4);
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 0;
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  std::vector<float> stepped;
  BatchesAhead ahead(loader, c10::Device(c10::kCPU), false, [&stepped](Batch& b) {
    const float v = b.image.flatten()[0].item<float>();
    if (v == 7) throw std::runtime_error("transform failed on 7");
    stepped.push_back(v);
    b.image = b.image * 2;
    b.label = b.label + 1;
  });
  ahead.start_epoch({3, 5}, 0);
  std::vector<float> seen;
  while (auto b = ahead.next()) {
    seen.push_back(b->image.flatten()[0].item<float>());
    EXPECT_EQ(b->label.flatten()[0].item<float>(), 1.0f);
  }
  EXPECT_EQ(seen, (std::vector<float>{6, 10}));
  EXPECT_EQ(stepped, (std::vector<float>{3, 5}));
  ahead.start_epoch({1, 7, 2}, 1);
  const auto first = ahead.next();  // 7 is taken ahead here, and fails
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->image.flatten()[0].item<float>(), 2.0f);
  try {
    (void)ahead.next();
    ADD_FAILURE() << "the host step's error was not raised";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "transform failed on 7");
  }
}

// On a GPU (skipped without one): copies run on a side stream and each batch
// arrives whole on the device.
TEST(BatchesAheadTest, CopiesOnASideStreamAndDeliversWholeBatchesOnTheGpu) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const SampleSource source = constant_volumes(64);
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 2;
  DataLoader loader(source, Compose(std::vector<std::shared_ptr<const Transform>>{}), o);
  BatchesAhead ahead(loader, c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(ahead.side_stream());
  ahead.start_epoch({0, 1, 2, 3, 4, 5, 6, 7}, 0);
  int64_t batches = 0;
  while (auto b = ahead.next()) {
    EXPECT_TRUE(b->image.is_cuda());
    EXPECT_TRUE(at::equal(b->image.cpu(), b->host.image));
    ++batches;
  }
  EXPECT_EQ(batches, 4);
}

}  // namespace
}  // namespace volshard
