#pragma once
// What the network is fed, in one place: the cached deterministic prefix
// (load_pair) and the random augmentation after it. `volshard train`,
// `volshard preview`, the Python Loader and bench_pipeline all build their
// pipeline from these, so a preview shows exactly what training feeds.
//
// The defaults are MONAI's DDP tutorial (ScaleIntensity; RandCropByPosNegLabel,
// RandRotate90). configs/spleen.json and configs/brats.json set the Decathlon
// pipelines: Orientation, Spacing, a CT window or MRI normalisation,
// CropForeground, and (BraTS) RandSpatialCrop, RandFlip per axis,
// RandScaleIntensity, RandShiftIntensity.

#include <cstdint>

#include "volshard/datasets/load_pair.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

enum class CropKind {
  kPosNeg,   ///< RandCropByPosNegLabel(pos 1, neg 1, num_samples)
  kSpatial,  ///< RandSpatialCrop of a fixed size, num_samples independent draws
};

/// RandCrop's num_samples: at most this many crops of one volume.
inline constexpr int64_t kMaxCropsPerVolume = 4096;

struct FeedOptions {
  PrefixOptions prefix;  ///< the deterministic, cached part
  CropKind crop_kind = CropKind::kPosNeg;
  int64_t crop = 96;           ///< crop edge (cubic), voxels, >= 1
  int64_t num_samples = 4;     ///< crops per volume, >= 1
  bool allow_smaller = false;  ///< a crop larger than a volume shrinks to it instead of failing
  double rot90_prob = 0.5;     ///< RandRotate90(max_k 3, axes (0, 2)) probability; 0: none
  double flip_prob = 0.0;      ///< RandFlip on each spatial axis on its own; 0: none
  double rand_scale = 0.0;     ///< RandScaleIntensity(factors +-v, prob 1); 0: none
  double rand_shift = 0.0;     ///< RandShiftIntensity(offsets +-v, prob 1); 0: none
  /// Throws std::invalid_argument naming the field ("--crop=0 must be >= 1").
  void validate() const;
};

/// The random steps after the cached prefix: the crop (num_samples of them),
/// RandRotate90, RandFlip per axis, NormalizeIntensity when the prefix's
/// intensity is kNormalize on kCrop (on each crop, as MONAI's BraTS pipeline),
/// RandScaleIntensity, RandShiftIntensity; each step only when configured.
Compose feed_augmentation(const FeedOptions& options);

/// The deterministic prefix as training caches it: the prefix options, label
/// indices (for RandCropByPosNegLabel), file-order image when nothing
/// resamples it, compact uint8 labels (the loader's batches widen them to
/// float32), normalisation deferred to the crops unless normalize_on is kVolume.
PairOptions feed_prefix(const FeedOptions& options = {});

/// The prefix for validation and prediction: the whole volume, normalised,
/// C order, no label indices, no spatial_pad.
PairOptions whole_volume_prefix(const PrefixOptions& prefix);

}  // namespace volshard
