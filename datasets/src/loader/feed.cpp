#include "volshard/datasets/feed.h"

#include <stdexcept>
#include <string>

namespace volshard {

void FeedOptions::validate() const {
  if (crop < 1) throw std::invalid_argument("--crop=" + std::to_string(crop) + " must be >= 1");
  if (num_samples < 1)
    throw std::invalid_argument("--num-samples=" + std::to_string(num_samples) + " must be >= 1");
  if (!(rot90_prob >= 0 && rot90_prob <= 1))
    throw std::invalid_argument("--rot90-prob=" + std::to_string(rot90_prob) +
                                " must be in [0, 1]");
}

Compose feed_augmentation(const FeedOptions& o) {
  o.validate();
  PosNegCropOptions crop;
  crop.spatial_size = {o.crop, o.crop, o.crop};
  crop.num_samples = o.num_samples;
  crop.allow_smaller = o.allow_smaller;
  Rotate90Options rot;
  rot.prob = o.rot90_prob;
  rot.max_k = 3;
  rot.spatial_axes = {0, 2};
  return Compose({make_rand_crop_by_pos_neg_label(crop), make_rand_rotate90(rot)});
}

PairOptions feed_prefix() {
  PairOptions o;
  o.compact_label = true;  // uint8 in the cache; the loader's batches are float32
  return o;
}

}  // namespace volshard
