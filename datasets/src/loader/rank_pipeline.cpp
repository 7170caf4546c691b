#include "volshard/datasets/rank_pipeline.h"

#include <utility>
#include <vector>

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
  SampleCache cache(
      [&pairs, prefix](int64_t i) { return load_pair(pairs[static_cast<size_t>(i)], i, prefix); },
      static_cast<int64_t>(pairs.size()), std::move(c));
  // CropForeground's box is known once the voxels are: every cached volume
  // is checked against the crop here, all of them named, before the loader's
  // workers start (volumes past the cache are checked as they are cropped).
  if (feed.prefix.crop_foreground && !feed.allow_smaller) {
    std::vector<VolumeShape> shapes;
    for (int64_t i = 0; i < cache.cached_items(); ++i) {
      const at::Tensor image = cache.get(i).image;
      shapes.push_back(
          {pairs[static_cast<size_t>(i)].image, {image.size(1), image.size(2), image.size(3)}});
    }
    check_crop_fits(feed, shapes, "after the prefix (CropForeground cut them)");
  }
  return cache;
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
