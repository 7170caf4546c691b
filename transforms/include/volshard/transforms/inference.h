#pragma once
// Whole-volume and sliding-window inference (MONAI's sliding_window_inference
// with mode "constant": overlapping windows averaged).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>

namespace volshard {

/// N x C x X x Y x Z -> N x C' x X x Y x Z (a network's forward).
using Predictor = std::function<at::Tensor(const at::Tensor&)>;

struct SlidingWindowOptions {
  std::array<int64_t, 3> roi{96, 96, 96};  ///< window size, voxels; >= 1
  double overlap = 0.25;                   ///< in [0, 1)
  int64_t sw_batch_size = 1;               ///< windows per forward call, >= 1
  void validate() const;                   ///< throws std::invalid_argument naming the field
};

/// Window starts along one axis of length `length`: MONAI's scan interval
/// max(1, floor(roi * (1 - overlap))), starts i * interval for i in [0,
/// ceil((length - roi) / interval)], the last clamped to length - roi.
/// One start (0) when length <= roi.
std::vector<int64_t> window_starts(int64_t length, int64_t roi, double overlap);

/// Runs `predict` on windows of `image` (1 x C x X x Y x Z; an axis shorter
/// than the ROI is zero-padded symmetrically, (roi - L) // 2 before, and
/// cropped back, as MONAI) and averages where windows overlap, as MONAI's on
/// tests/trainer/fixtures/sliding_window.json. Deterministic: windows in C
/// order of their starts.
at::Tensor sliding_window_inference(const at::Tensor& image, const SlidingWindowOptions& options,
                                    const Predictor& predict);

/// The whole volume in one call, zero-padded at the end of each axis up to a
/// multiple of `multiple` (the UNet's stride product) and cropped back.
at::Tensor whole_volume_inference(const at::Tensor& image, int64_t multiple,
                                  const Predictor& predict);

}  // namespace volshard
