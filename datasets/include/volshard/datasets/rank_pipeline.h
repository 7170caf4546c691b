#pragma once
// One rank's pipeline, built in one place for `volshard train`, the Python
// Loader and the benchmark: the SampleCache of the deterministic prefix
// (load_pair, feed_prefix) over the rank's pairs, and the DataLoader that
// crops and augments (feed_augmentation) on its worker threads.

#include <cstdint>
#include <vector>

#include "volshard/datasets/cache.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/loader.h"

namespace volshard {

class RankPipeline {
 public:
  /// Validates the options, fills the cache (cache.cache_dir: its config_key
  /// and item_files are set here, from the feed's prefix and `pairs`) and
  /// faults in the loader's batch buffers (DataLoader::reserve), so the first
  /// epoch runs as the next ones. Throws as FeedOptions::validate,
  /// LoaderOptions::validate and SampleCache's constructor.
  RankPipeline(std::vector<ImageLabelPair> pairs, const FeedOptions& feed,
               const LoaderOptions& loader, CacheOptions cache);
  RankPipeline(const RankPipeline&) = delete;  // the cache's loads point into pairs_
  RankPipeline& operator=(const RankPipeline&) = delete;

  DataLoader& loader() { return loader_; }
  const SampleCache& cache() const { return cache_; }
  /// What the constructor's DataLoader::reserve() faulted in, bytes.
  int64_t reserved_bytes() const { return reserved_bytes_; }

 private:
  const std::vector<ImageLabelPair> pairs_;  // items past the cache rate load from it on use
  const SampleCache cache_;
  DataLoader loader_;
  int64_t reserved_bytes_ = 0;
};

}  // namespace volshard
