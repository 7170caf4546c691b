#pragma once
// The unit every transform maps: an image/label pair with what was done to it.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/affine.h"

namespace volshard {

/// Parameters the random transforms drew, carried with the sample (as MONAI's
/// meta dict and applied_operations), so a trace can say what the network saw.
struct SampleMeta {
  int64_t index = -1;        ///< dataset index
  std::string source;        ///< image path, when loaded from a file
  int64_t patch_index = -1;  ///< which of a crop transform's num_samples, or -1
  bool cropped = false;
  bool foreground_centre = false;           ///< the crop centre was drawn from the foreground
  std::array<int64_t, 3> crop_centre{};     ///< after clamping, voxels
  std::array<int64_t, 3> crop_start{};      ///< first voxel of the crop in the source volume
  std::array<int64_t, 3> source_shape{};    ///< spatial shape before the crop
  int64_t rot90_k = 0;                      ///< quarter turns applied (0: none)
  std::array<int64_t, 2> rot90_axes{0, 1};  ///< spatial axes of the rotation
  std::array<bool, 3> flipped{};            ///< spatial axes flipped
  /// The intensity steps applied, in order, each named as MONAI names it with
  /// what it drew: RandScaleIntensity {factor}, RandShiftIntensity {offset},
  /// RandGaussianNoise {std}, RandGaussianSmooth {sigma x, y, z},
  /// RandAdjustContrast {gamma}, RandBiasField {its coefficients, MONAI's
  /// order}. Steps not applied are not listed.
  std::vector<std::pair<std::string, std::vector<double>>> intensity{};
  /// The resampling steps applied to the crop, as MONAI names them, with what
  /// they drew: RandZoom {zoom}, RandAffine {rotate x, y, z (radians), shear
  /// (MONAI's six), translate x, y, z (voxels), scale x, y, z}.
  std::vector<std::pair<std::string, std::vector<double>>> spatial{};
  Affine affine = identity_affine();  ///< voxel -> world of the volume before any crop
};

/// Flat C-order indices (last spatial axis fastest, as MONAI's
/// map_binary_to_indices) of the label's foreground (any channel non-zero,
/// channel 0 dropped when C > 1) and background voxels.
///
/// Without an image threshold the background is every voxel that is not
/// foreground, and it is not listed (that list is ~7 MB for a 128^3 volume):
/// `voxels` > 0 says so, and background_at(k) finds the k-th background voxel
/// from the foreground list in O(log n). With an image threshold (MONAI's
/// image_key) the background is listed in `background` and `voxels` is 0.
struct LabelIndices {
  std::vector<int32_t> foreground;  ///< ascending
  std::vector<int32_t> background;  ///< ascending; listed only when voxels == 0
  int64_t voxels = 0;               ///< > 0: the background is [0, voxels) minus foreground
  int64_t background_count() const;
  /// The k-th background voxel in C order, k in [0, background_count()).
  int32_t background_at(int64_t k) const;
  bool empty() const { return foreground.empty() && background_count() == 0; }
};

/// Crops, quarter turns and flips of the spatial axes, composed but not yet
/// applied: voxel (i0, i1, i2) of the view is the source voxel
/// origin + sum_d sign[d] * i_d * e(axis[d]). A crop, rotation or flip only
/// changes this map; the pixels move once, when the sample is materialised
/// (straight into the batch, in the loader).
struct SpatialMap {
  std::array<int64_t, 3> origin{};       ///< source voxel of view voxel (0, 0, 0)
  std::array<int64_t, 3> size{};         ///< the view's spatial shape
  std::array<int64_t, 3> axis{0, 1, 2};  ///< source axis of each view axis (a permutation)
  std::array<int64_t, 3> sign{1, 1, 1};  ///< +1 or -1 (reversed)

  /// The whole source, unchanged.
  static SpatialMap identity(const std::array<int64_t, 3>& shape);
  bool is_identity(const std::array<int64_t, 3>& source_shape) const;
  /// The box [start, start + size) of this view.
  SpatialMap cropped(const std::array<int64_t, 3>& start, const std::array<int64_t, 3>& size) const;
  /// View axis d reversed.
  SpatialMap flipped(int64_t d) const;
  /// torch.rot90(view, k, (p, q)) over the spatial axes p != q.
  SpatialMap rotated90(int64_t k, int64_t p, int64_t q) const;
};

/// A volume with its voxel-to-world affine.
struct SpatialImage {
  at::Tensor data;  ///< C x X x Y x Z
  Affine affine{};
};

struct Sample {
  /// C x X x Y x Z, float32. Any strides without overlap (a file-order view
  /// from read_volume is fine); transforms' outputs are contiguous.
  at::Tensor image;
  /// C x X x Y x Z, float32 (MONAI loads labels as float too) or a compact
  /// uint8 (PairOptions::compact_label; batches widen it), any strides.
  at::Tensor label;
  /// Filled by the cache (else the crop scans the label): saves a scan per
  /// epoch. Shared, so copying a cached sample copies no index list. Refers to
  /// image/label as stored, before `view`.
  std::shared_ptr<const LabelIndices> indices;
  /// Set only by Compose::lazy (and Transform::lazy): the sample is this view
  /// of image and label. materialize() or materialize_into() applies it.
  std::optional<SpatialMap> view;
  SampleMeta meta;
};

}  // namespace volshard
