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

/// Whether theta (resample_theta's) maps the grid's axes onto the input's, in
/// the same order: its 3 x 3 part diagonal, exact zeros off it, as Spacing's
/// is for any affine whose voxel axes lie along the world's (any orientation
/// code, any spacing). An oblique affine's solve leaves rounding off the
/// diagonal: it is not.
bool maps_axes_to_axes(const at::Tensor& theta);

/// resample(), its output computed in slabs of whole planes along the first
/// spatial axis, each of at least slab_voxels voxels (clamped to >= 64) unless
/// the grid is smaller. Every slab's sampling grid has the bits
/// at::affine_grid_generator gives for the whole grid, so the result does not
/// depend on slab_voxels. `separable`: where the grid maps axes to axes (its
/// theta diagonal, as Spacing's always is), per-axis tables of coordinates and
/// weights replace the grid and grid_sampler's loop, with the same bits;
/// false: always affine_grid and grid_sampler (the reference the tests hold
/// the tables to).
SpatialImage resample_in_slabs(const SpatialImage& image, const Grid& grid, Interpolation mode,
                               int64_t slab_voxels, bool separable);

}  // namespace volshard::detail
