#pragma once
// Trilinear up-sampling whose backward is deterministic on every device:
// torch's upsample_trilinear3d forward, and for the backward the transpose of
// the same interpolation written as three matrix products (one per axis: the
// 1-d weights torch uses, align_corners false), which CUDA computes without
// the atomic adds of upsample_trilinear3d_backward_out_cuda, the kernel torch
// refuses under deterministic algorithms.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace volshard::detail {

/// x (N x C x D x H x W) up-sampled by `scale` per spatial axis, as
/// F.interpolate(x, scale_factor=scale, mode="trilinear", align_corners=False):
/// the same forward values; the gradient through the matrix products.
at::Tensor upsample_trilinear_deterministic(const at::Tensor& x,
                                            const std::array<double, 3>& scale);

/// The 1-d interpolation torch applies along one axis (align_corners false,
/// `scale` as given to interpolate): out_size x in_size weights, float64.
at::Tensor linear_interpolation_matrix(int64_t in_size, int64_t out_size, double scale);

}  // namespace volshard::detail
