#include "volshard/datasets/rank_pipeline.h"

#include <utility>

#include "volshard/datasets/load_pair.h"

namespace volshard {
namespace {

// The options are checked before the fill, which may take minutes.
SampleCache make_cache(const std::vector<ImageLabelPair>& pairs, const FeedOptions& feed,
                       const LoaderOptions& loader, CacheOptions c) {
  loader.validate();
  feed.validate();
  const PairOptions prefix = feed_prefix(feed);
  if (!c.cache_dir.empty()) {
    // Ranks may share the folder: entries are written atomically (temporary
    // file, rename), so two ranks writing the same entry leave one whole copy.
    c.config_key = prefix.config_key();
    c.item_files = files_of(pairs);
  }
  return SampleCache(
      [&pairs, prefix](int64_t i) { return load_pair(pairs[static_cast<size_t>(i)], i, prefix); },
      static_cast<int64_t>(pairs.size()), std::move(c));
}

}  // namespace

RankPipeline::RankPipeline(std::vector<ImageLabelPair> pairs, const FeedOptions& feed,
                           const LoaderOptions& loader, CacheOptions cache)
    : pairs_(std::move(pairs)),
      cache_(make_cache(pairs_, feed, loader, std::move(cache))),
      loader_(cache_.source(), feed_augmentation(feed), loader) {
  reserved_bytes_ = loader_.reserve();  // the batch buffers faulted in now, not in the first epoch
}

}  // namespace volshard
