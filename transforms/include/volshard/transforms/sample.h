#pragma once
// The unit every transform maps: an image/label pair with what was done to it.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
};

/// Flat C-order indices (last spatial axis fastest, as MONAI's
/// map_binary_to_indices) of the label's foreground (any channel non-zero,
/// channel 0 dropped when C > 1) and background voxels.
struct LabelIndices {
  std::vector<int32_t> foreground;
  std::vector<int32_t> background;
  bool empty() const { return foreground.empty() && background.empty(); }
};

struct Sample {
  at::Tensor image;  ///< C x X x Y x Z, float32, contiguous
  at::Tensor label;  ///< C x X x Y x Z, float32 (MONAI loads labels as float too), contiguous
  /// Filled by the cache (else the crop scans the label): saves a scan per
  /// epoch. Shared, so copying a cached sample copies no index list.
  std::shared_ptr<const LabelIndices> indices;
  SampleMeta meta;
};

}  // namespace volshard
