#pragma once
// Zero padding of the spatial axes, the one helper that SpatialPad and the
// sliding window share (private to transforms/).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace volshard::detail {

/// Where the zeros go: MONAI's method "symmetric" ((target - L) // 2 before,
/// the rest after), or all after the voxels ("end").
enum class PadAt { kSymmetric, kEnd };

/// `x` with its last three (spatial) axes zero-padded up to `target`; an axis
/// already as long, or target <= 0, is kept, and `x` itself comes back where
/// none grows. `before`, when given, gets the zeros put before each axis.
at::Tensor pad_spatial(const at::Tensor& x, const std::array<int64_t, 3>& target, PadAt at,
                       std::array<int64_t, 3>* before = nullptr);

}  // namespace volshard::detail
