#pragma once
// Voxel conversion between NIfTI file order and channel-first C order.
// Standard library only.
//
// File order (NIfTI): i fastest, then j, k, channel: offset = i + X*(j + Y*(k + Z*c)).
// C order (volshard's Volume, MONAI's channel-first array):
// offset = k + Z*(j + Y*(i + X*c)). So dst[c][i][j][k] = src(i, j, k, c), which
// is nibabel's np.asanyarray(img.dataobj)[i, j, k, c].

#include <array>
#include <cstdint>

#include "volshard/volume_io/nifti_header.h"

namespace volshard {

struct VoxelCopySpec {
  std::array<int64_t, 4> cxyz{1, 1, 1, 1};  ///< channels, X, Y, Z; each >= 1
  NiftiDatatype src_type = NiftiDatatype::kFloat32;
  bool src_big_endian = false;
  /// Output element type; integer outputs must hold every source value
  /// (uint16 -> int32, uint32 -> int64, ...), floating ones take any source.
  NiftiDatatype dst_type = NiftiDatatype::kFloat32;
  /// nibabel's apply_read_scaling, in float64: v = double(x); if slope != 1:
  /// v *= slope; if inter != 0: v += inter. Needs a floating dst_type.
  bool scale = false;
  double slope = 1;
  double inter = 0;
  /// true: file order -> C order (the transpose above); false: keep file order.
  bool to_c_order = true;
  /// Allows dst_type uint8 from any integer source: values outside [0, 255]
  /// wrap, and copy_voxels counts them (a compact label read: see
  /// ReadOptions::uint8_if_it_fits).
  bool narrow_to_uint8 = false;
};

/// Converts the voxels of rows j in [j_begin, j_end) of every channel (all
/// rows: 0, Y). `src` holds the whole volume in file order and byte order,
/// any alignment; `dst` the whole output, aligned for dst_type. Disjoint row
/// ranges may run concurrently. Returns the number of NaN/Inf outputs
/// (0 for integer outputs), or with narrow_to_uint8 the number of values
/// outside [0, 255]. Throws std::invalid_argument for a spec it cannot
/// do (narrowing integer output, scaling to an integer type).
int64_t copy_voxels(const uint8_t* src, void* dst, const VoxelCopySpec& spec, int64_t j_begin,
                    int64_t j_end);

/// NaN/Inf values among n host-order voxels of `type` (0 for integer types).
int64_t count_nonfinite(const void* data, int64_t n, NiftiDatatype type);

/// The reverse for writing: C-order `src` of src_type (host byte order) to
/// file-order little-endian `dst` of the same type; rows j in [j_begin, j_end).
void c_order_to_file_order(const void* src, uint8_t* dst, NiftiDatatype type,
                           const std::array<int64_t, 4>& cxyz, int64_t j_begin, int64_t j_end);

}  // namespace volshard
