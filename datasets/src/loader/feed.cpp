#include "volshard/datasets/feed.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "volshard/core/error.h"
#include "volshard/core/limits.h"

namespace volshard {
namespace {

void check_unit(double v, const char* flag) {
  if (!(v >= 0 && v <= 1))
    throw std::invalid_argument(std::string(flag) + "=" + value_text(v) + " must be in [0, 1]");
}

}  // namespace

void FeedOptions::validate() const {
  prefix.validate();
  if (crop < 1) throw std::invalid_argument("--crop=" + std::to_string(crop) + " must be >= 1");
  if (num_samples < 1 || num_samples > kMaxCropsPerVolume)
    throw std::invalid_argument("--num-samples=" + std::to_string(num_samples) + " must be in [1, " +
                                std::to_string(kMaxCropsPerVolume) + "]");
  // One channel of this volume's crops, before a batch is even assembled.
  const double crop_voxels = static_cast<double>(crop) * static_cast<double>(crop) * crop;
  check_fits_in_memory(4.0 * crop_voxels * static_cast<double>(num_samples),
                       "--crop=" + std::to_string(crop) + " with --num-samples=" +
                           std::to_string(num_samples));
  check_unit(rot90_prob, "--rot90-prob");
  check_unit(flip_prob, "--flip-prob");
  if (!(rand_scale >= 0 && rand_scale < 1))
    throw std::invalid_argument("--rand-scale=" + value_text(rand_scale) + " must be in [0, 1)");
  if (!(rand_shift >= 0 && std::isfinite(rand_shift)))
    throw std::invalid_argument("--rand-shift=" + value_text(rand_shift) + " must be >= 0");
}

Compose feed_augmentation(const FeedOptions& o) {
  o.validate();
  std::vector<std::shared_ptr<const Transform>> steps;
  if (o.crop_kind == CropKind::kPosNeg) {
    PosNegCropOptions crop;
    crop.spatial_size = {o.crop, o.crop, o.crop};
    crop.num_samples = o.num_samples;
    crop.allow_smaller = o.allow_smaller;
    steps.push_back(make_rand_crop_by_pos_neg_label(crop));
  } else {
    steps.push_back(make_rand_spatial_crop({o.crop, o.crop, o.crop}, o.num_samples));
  }
  if (o.rot90_prob > 0) {
    Rotate90Options rot;
    rot.prob = o.rot90_prob;
    rot.max_k = 3;
    rot.spatial_axes = {0, 2};
    steps.push_back(make_rand_rotate90(rot));
  }
  if (o.flip_prob > 0) {
    for (int64_t axis = 0; axis < 3; ++axis) {
      FlipOptions flip;
      flip.prob = o.flip_prob;
      flip.spatial_axes = {axis};
      steps.push_back(make_rand_flip(flip));
    }
  }
  if (o.prefix.intensity == IntensityKind::kNormalize &&
      o.prefix.normalize_on == NormalizeOn::kCrop)
    steps.push_back(make_normalize_intensity(o.prefix.normalize));
  if (o.rand_scale > 0)
    steps.push_back(make_rand_scale_intensity({-o.rand_scale, o.rand_scale, 1}));
  if (o.rand_shift > 0)
    steps.push_back(make_rand_shift_intensity({-o.rand_shift, o.rand_shift, 1}));
  return Compose(std::move(steps));
}

PairOptions feed_prefix(const FeedOptions& o) {
  PairOptions p;
  p.prefix = o.prefix;
  p.defer_normalize = o.prefix.normalize_on == NormalizeOn::kCrop;
  p.label_indices = o.crop_kind == CropKind::kPosNeg;
  p.compact_label = true;  // uint8 in the cache; the loader's batches are float32
  return p;
}

PairOptions whole_volume_prefix(const PrefixOptions& prefix) {
  PairOptions p;
  p.prefix = prefix;
  p.prefix.spatial_pad.clear();  // a training step: the sliding window pads by itself
  p.label_indices = false;
  p.image_layout = VolumeLayout::kContiguous;
  return p;
}

}  // namespace volshard
