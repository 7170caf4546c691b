#pragma once
// What the network is fed, in one place: the cached deterministic prefix
// (load_pair) and the random augmentation after it. `volshard train`,
// `volshard preview` and bench_pipeline all build their pipeline from these,
// so a preview shows exactly what training feeds.

#include <cstdint>

#include "volshard/datasets/load_pair.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

struct FeedOptions {
  int64_t crop = 96;           ///< RandCropByPosNegLabel edge (cubic), voxels, >= 1
  int64_t num_samples = 4;     ///< crops per volume, >= 1
  bool allow_smaller = false;  ///< a crop larger than a volume shrinks to it instead of failing
  double rot90_prob = 0.5;     ///< RandRotate90's probability, in [0, 1]
  /// Throws std::invalid_argument naming the field ("--crop=0 must be >= 1").
  void validate() const;
};

/// MONAI's DDP tutorial augmentation: RandCropByPosNegLabel(crop^3, pos 1,
/// neg 1, num_samples, allow_smaller) then RandRotate90(rot90_prob, max_k 3,
/// spatial axes (0, 2)).
Compose feed_augmentation(const FeedOptions& options);

/// The deterministic prefix as training caches it: ScaleIntensity, label
/// indices, file-order image, compact uint8 labels (the loader's batches
/// widen them to float32).
PairOptions feed_prefix();

}  // namespace volshard
