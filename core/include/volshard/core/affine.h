#pragma once
// A 4 x 4 voxel-to-world matrix, as NIfTI and nibabel hold one: row-major,
// (i, j, k, 1) -> (x, y, z, 1) in millimetres. Std only.

#include <array>

namespace volshard {

using Affine = std::array<std::array<double, 4>, 4>;

/// The identity.
Affine identity_affine();
/// a * b.
Affine multiply(const Affine& a, const Affine& b);

}  // namespace volshard
