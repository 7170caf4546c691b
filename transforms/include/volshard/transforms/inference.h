#pragma once
// Whole-volume and sliding-window inference (MONAI's sliding_window_inference:
// overlapping windows averaged, or weighted by a Gaussian), nnU-Net's
// test-time mirroring, and MONAI's KeepLargestConnectedComponent.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace volshard {

/// N x C x X x Y x Z -> N x C' x X x Y x Z (a network's forward).
using Predictor = std::function<at::Tensor(const at::Tensor&)>;

/// How overlapping windows combine (MONAI's BlendMode): kConstant averages
/// them; kGaussian weights each window's voxels by compute_importance_map's
/// Gaussian, centred in the window, so a voxel near a window's edge counts
/// less than one at its centre.
enum class BlendMode { kConstant, kGaussian };

/// The largest sigma_scale a Gaussian blend takes (a flat map well before).
inline constexpr double kMaxSigmaScale = 10.0;

struct SlidingWindowOptions {
  std::array<int64_t, 3> roi{96, 96, 96};  ///< window size, voxels; >= 1
  double overlap = 0.25;                   ///< in [0, 1)
  int64_t sw_batch_size = 1;               ///< windows per forward call, >= 1
  BlendMode blend = BlendMode::kConstant;  ///< MONAI's `mode`
  /// kGaussian's sigma per axis as a fraction of the window's edge (MONAI's
  /// sigma_scale, default 0.125); each in (0, 10].
  std::array<double, 3> sigma_scale{0.125, 0.125, 0.125};
  void validate() const;  ///< throws std::invalid_argument naming the field
};

/// MONAI 1.4's compute_importance_map(roi, mode, sigma_scale) as float32 X x
/// Y x Z, bit for bit: ones (kConstant), or the product of per-axis
/// exp(x^2 / (-2 sigma^2)) over x = -(n - 1) / 2 ... (n - 1) / 2, sigma =
/// n * sigma_scale, clamped below at max(its minimum, 1e-3).
at::Tensor importance_map(const std::array<int64_t, 3>& roi, BlendMode blend,
                          const std::array<double, 3>& sigma_scale);

/// Window starts along one axis of length `length`: MONAI's scan interval
/// max(1, floor(roi * (1 - overlap))), starts i * interval for i in [0,
/// ceil((length - roi) / interval)], the last clamped to length - roi.
/// One start (0) when length <= roi.
std::vector<int64_t> window_starts(int64_t length, int64_t roi, double overlap);

/// Runs `predict` on windows of `image` (1 x C x X x Y x Z; an axis shorter
/// than the ROI is zero-padded symmetrically, (roi - L) // 2 before, and
/// cropped back, as MONAI) and combines them where they overlap: the sum of
/// each window's output times importance_map over the sum of the maps, as
/// MONAI's on tests/trainer/fixtures/sliding_window.json (both modes).
/// Deterministic: windows in C order of their starts.
at::Tensor sliding_window_inference(const at::Tensor& image, const SlidingWindowOptions& options,
                                    const Predictor& predict);

/// The whole volume in one call, zero-padded at the end of each axis up to a
/// multiple of `multiple` (the UNet's stride product) and cropped back.
at::Tensor whole_volume_inference(const at::Tensor& image, int64_t multiple,
                                  const Predictor& predict);

/// nnU-Net's test-time mirroring (its default for 3D: all three axes):
/// `predict(x)` plus, for every non-empty subset of the spatial `axes` (0 =
/// X, 1 = Y, 2 = Z; sizes 1, then 2, then 3, each in itertools.combinations'
/// order), predict(x flipped over it) flipped back, divided by their count
/// (8 for three axes), in the output's dtype. Empty `axes`: `predict` itself.
/// Throws std::invalid_argument for an axis outside [0, 2] or named twice.
Predictor mirrored(Predictor predict, const std::vector<int64_t>& axes);

/// MONAI's KeepLargestConnectedComponent (independent, connectivity None:
/// 26 neighbours in 3D) on a binary X x Y x Z mask: the voxels of its largest
/// connected component (equal sizes: the one whose first voxel in C order
/// comes first), as bool. A mask with at most one component is returned as
/// it is (as bool).
at::Tensor largest_component(const at::Tensor& mask);

/// largest_component of every class > 0 of an integer label map (X x Y x Z),
/// each on its own: a class's voxels outside its largest component become 0
/// (MONAI's KeepLargestConnectedComponent with applied_labels 1..max,
/// independent, on a label map). Same dtype and device.
at::Tensor keep_largest_components(const at::Tensor& labels);

}  // namespace volshard
