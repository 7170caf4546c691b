#pragma once
// Spacing's internals, private to transforms/ (and its tests): the matrix
// MONAI hands to F.affine_grid, and resample() with a chosen slab size.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

#include "volshard/transforms/transforms.h"

namespace volshard::detail {

/// MONAI's theta for resampling an image of `in_shape` voxels with affine
/// `in_affine` onto `grid`: to_norm_affine(solve(in_affine, grid.affine)) with
/// the axes reversed, 1 x 3 x 4 float64, the argument F.affine_grid(theta,
/// (1, C, *grid.shape), align_corners=False) receives in SpatialResample.
/// Throws std::invalid_argument for a singular in_affine.
at::Tensor resample_theta(const std::array<int64_t, 3>& in_shape, const Affine& in_affine,
                          const Grid& grid);

/// resample(), its output computed in slabs of whole planes along the first
/// spatial axis, each of at least slab_voxels voxels (clamped to >= 64) unless
/// the grid is smaller. Every slab's sampling grid has the bits
/// at::affine_grid_generator gives for the whole grid, so the result does not
/// depend on slab_voxels.
SpatialImage resample_in_slabs(const SpatialImage& image, const Grid& grid, Interpolation mode,
                               int64_t slab_voxels);

}  // namespace volshard::detail
