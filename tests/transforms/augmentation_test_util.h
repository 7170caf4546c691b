#pragma once
// The tutorial's augmentation at any crop shape, for tests that need a
// pipeline but not the training feed (datasets' feed_augmentation is cubic).

#include <array>
#include <cstdint>

#include "volshard/transforms/transforms.h"

namespace volshard {

/// RandCropByPosNegLabel(crop, pos 1, neg 1, num_samples) then
/// RandRotate90(prob 0.5, max_k 3, spatial axes (0, 2)).
inline Compose test_augmentation(std::array<int64_t, 3> crop, int64_t num_samples) {
  PosNegCropOptions c;
  c.spatial_size = crop;
  c.num_samples = num_samples;
  Rotate90Options r;
  r.prob = 0.5;
  r.spatial_axes = {0, 2};
  return Compose({make_rand_crop_by_pos_neg_label(c), make_rand_rotate90(r)});
}

}  // namespace volshard
