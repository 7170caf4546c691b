#pragma once
// Crops: MONAI's RandCropByPosNegLabel (and the label indices it draws
// from), RandSpatialCrop, CropForeground and SpatialPad. (transforms/src/crop.cpp)

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "volshard/core/seed_streams.h"
#include "volshard/transforms/sample.h"

namespace volshard {

// ---- RandCropByPosNegLabel ------------------------------------------------

struct PosNegCropOptions {
  std::array<int64_t, 3> spatial_size{96, 96, 96};  ///< <= 0: the image's size
  double pos = 1.0;                                 ///< >= 0
  double neg = 1.0;                                 ///< >= 0, pos + neg > 0
  int64_t num_samples = 1;                          ///< >= 1
  double image_threshold = 0.0;  ///< background is image > threshold when use_image_threshold
  bool use_image_threshold =
      false;                   ///< MONAI's image_key: restrict background to image > threshold
  bool allow_smaller = false;  ///< a crop larger than the image shrinks to it instead of failing
  void validate() const;       ///< throws std::invalid_argument naming the value
};

struct CropParams {
  bool foreground = false;          ///< the centre was drawn from the foreground
  std::array<int64_t, 3> voxel{};   ///< the drawn voxel, before clamping
  std::array<int64_t, 3> centre{};  ///< after clamping
  std::array<int64_t, 3> start{};   ///< in [0, L - size]
  std::array<int64_t, 3> size{};
};

/// MONAI's map_binary_to_indices over a C x X x Y x Z label (and optionally
/// the image, for use_image_threshold). One pass over contiguous memory.
LabelIndices label_indices(const at::Tensor& label, const at::Tensor* image = nullptr,
                           double image_threshold = 0.0);

/// The crop size after spatial_size <= 0 and allow_smaller are applied; throws
/// std::invalid_argument naming both sizes if a crop exceeds the image.
std::array<int64_t, 3> crop_size(const std::array<int64_t, 3>& shape,
                                 const PosNegCropOptions& options);

/// MONAI's correct_crop_centers for one axis: lo = s // 2, hi = trunc(L + 1 - s / 2),
/// hi += 1 if lo == hi, centre = min(max(c, lo), hi - 1).
int64_t clamp_crop_centre(int64_t centre, int64_t size, int64_t length);

/// Draws num_samples crops: each independently takes the foreground with
/// probability pos / (pos + neg) (one uniform_double), then a uniform voxel of
/// that class (one below(count)), unravels it C-order and clamps it. With no
/// foreground (or no background) it warns once per `warned` flag and uses the
/// other class; with neither it throws std::invalid_argument.
std::vector<CropParams> sample_pos_neg_crops(const std::array<int64_t, 3>& shape,
                                             const LabelIndices& indices,
                                             const PosNegCropOptions& options, StreamRng& rng,
                                             std::atomic<bool>* warned = nullptr);

/// One strided copy of the crop from image and label; meta records it.
Sample apply_crop(const Sample& sample, const CropParams& crop, int64_t patch_index);
/// The same crop, left pending in sample.view (no pixel is copied).
Sample crop_lazy(const Sample& sample, const CropParams& crop, int64_t patch_index);

// ---- RandSpatialCrop ------------------------------------------------------

/// A uniformly placed crop of `size` (each start uniform in [0, L - size]).
CropParams sample_spatial_crop(const std::array<int64_t, 3>& shape,
                               const std::array<int64_t, 3>& size, StreamRng& rng);

// ---- CropForeground ---------------------------------------------------------

/// A box of voxels: [start, end) per spatial axis.
struct VoxelBox {
  std::array<int64_t, 3> start{};
  std::array<int64_t, 3> end{};
};

/// MONAI's generate_spatial_bounding_box with select_fn x > 0 over every
/// channel of `source` (C x X x Y x Z), grown by `margin` voxels per side and
/// clamped to the volume (MONAI 1.4's allow_smaller=True). No foreground: an
/// empty box at the origin, as MONAI.
VoxelBox foreground_box(const at::Tensor& source, int64_t margin = 0);

/// The box cut out of the image, the affine moved so that every voxel keeps
/// its world position (MONAI's CropForeground, MetaTensor affine).
SpatialImage crop_box(const SpatialImage& image, const VoxelBox& box);

/// MONAI's SpatialPad(spatial_size, method "symmetric", mode "constant" 0):
/// each spatial axis shorter than size[a] grows to it, (size - L) // 2 zeros
/// before and the rest after; an axis already as long, or size[a] <= 0, is
/// kept. The affine moves so that every voxel keeps its world position.
SpatialImage spatial_pad(const SpatialImage& image, const std::array<int64_t, 3>& size);

}  // namespace volshard
