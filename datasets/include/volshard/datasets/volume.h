#pragma once
// NIfTI volumes as ATen tensors, indexed as nibabel indexes them.
//
// read_volume(path).data[c][i][j][k] == np.asanyarray(nib.load(path).dataobj)[i, j, k, c]
// (for a 3D file, c = 0). The tensor is channel-first C x X x Y x Z, as MONAI's
// LoadImage + EnsureChannelFirst (channel_dim=-1) give it; the last NIfTI
// dimension of a 4D file is the channel.
//
// Element types (what np.asanyarray(img.dataobj) gives, where ATen has it):
//   no scaling:  uint8 -> uint8, int8 -> int8, int16 -> int16, int32 -> int32,
//                int64 -> int64, float32 -> float32, float64 -> float64,
//                uint16 -> int32 and uint32 -> int64 (value-preserving; numpy
//                keeps uint16/uint32, ATen 1.13 has neither)
//   scaling:     float64 for every on-disk type (nibabel's apply_read_scaling:
//                x * scl_slope, then + scl_inter when it is not 0, in float64)
//   as_float:    float32 of the above (MONAI LoadImage's default dtype)
// (nibabel computes in np.longdouble instead of float64 only when scaling an
// integer type's extremes would overflow float64, |scl_slope| > ~1e289; we
// stay in float64 and give inf there.)
// "Scaling" is nibabel's rule: scl_slope finite and != 0, and (scl_slope,
// scl_inter) != (1, 0); see NiftiHeader::has_scaling().

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "volshard/volume_io/nifti_header.h"

namespace volshard {

enum class VolumeLayout {
  kContiguous,     ///< data is contiguous C x X x Y x Z (one transposing copy)
  kFileOrderView,  ///< data is a permuted view of file-order storage (strides
                   ///< XYZ, 1, X, XY): no transposing copy, and no copy at all
                   ///< when no conversion is needed; same values and indexing
};

struct ReadOptions {
  int64_t max_voxels = int64_t{4} << 30;  ///< refuse larger volumes before allocating
  bool apply_scaling = true;  ///< false: the stored values (nibabel's dataobj.get_unscaled())
  bool as_float = false;      ///< float32 output (MONAI LoadImage's dtype)
  VolumeLayout layout = VolumeLayout::kContiguous;
  /// Spread the transposing copy over ATen's intra-op threads
  /// (at::set_num_threads). Off by default: loaders already read several
  /// volumes at once, and each calling thread would start its own team.
  /// Results do not depend on it.
  bool parallel = false;
  /// Fill Volume::nonfinite_voxels. false saves a pass over the voxels of a
  /// file-order read of float data (the count is free in a converting copy);
  /// nonfinite_voxels is then -1 where it was not counted.
  bool count_nonfinite = true;
  /// A compact label: uint8 output when the file holds integers (any integer
  /// datatype, no scaling applied) that all lie in [0, 255]. Otherwise, and
  /// for float files, the output is what the options above say; data's
  /// dtype tells which. A quarter of the memory of float32, and faster to
  /// scan and crop.
  bool uint8_if_it_fits = false;
};

struct Volume {
  /// C x X x Y x Z, CPU; data[c][i][j][k] == nibabel's array[i, j, k, c].
  at::Tensor data;
  std::array<double, 3> spacing_mm{1, 1, 1};  ///< pixdim[1..3] (nibabel's zooms, after its fixes)
  Affine affine{};                            ///< nibabel's img.affine (voxel -> mm, row-major)
  NiftiDatatype disk_dtype = NiftiDatatype::kFloat32;
  std::string path;
  int64_t nonfinite_voxels = 0;  ///< NaN/Inf values in data (0 for integer data; -1: not counted)
  NiftiHeader header;            ///< the parsed header
};

/// Reads a .nii or .nii.gz (gzip detected by content). Throws
/// std::runtime_error naming the path and the field for bad files (see
/// read_nifti). Thread-safe.
Volume read_volume(const std::string& path, const ReadOptions& options = {});

/// read_volume with as_float = true: what MONAI's LoadImage (nibabel reader,
/// dtype float32) returns, channel-first.
Volume read_volume_as_float(const std::string& path, ReadOptions options = {});

/// The element type read_volume gives for a header and options (with
/// uint8_if_it_fits: uint8 if the values fit, which only the voxels tell).
at::ScalarType volume_dtype(const NiftiHeader& header, const ReadOptions& options = {});

struct WriteOptions {
  int gzip_level = -1;    ///< -1: gzip level 1 if the path ends in ".gz", else none; 0: none; 1..12
  /// 1: NIfTI-1 (affine stored as float32, dims up to 32767); 2: NIfTI-2
  /// (float64, exact); 0: NIfTI-1 where the dims fit it, else NIfTI-2.
  int nifti_version = 0;
  std::vector<double> spacing_mm;  ///< pixdim[1..3]; empty: the affine's column norms
  std::string descrip;
  bool parallel = false;  ///< as ReadOptions::parallel, for the transposing copy
};

/// Writes `data` (X x Y x Z, or C x X x Y x Z with C the last NIfTI
/// dimension; C == 1 writes a 3D file) so that read_volume / nibabel read back
/// the same values, shape and dtype, and this affine (rounded to float32 for
/// NIfTI-1). Element types: uint8, int8, int16, int32, int64, float32,
/// float64; others throw std::invalid_argument naming the dtype. sform
/// (code 2) and, unless the affine has shear, qform (code 2) come from the
/// affine. Atomic: a temporary file beside `path`, then rename; a failure
/// (disk full, permissions) leaves `path` untouched and throws
/// std::runtime_error naming it.
void write_volume(const std::string& path, const at::Tensor& data, const Affine& affine,
                  const WriteOptions& options = {});

}  // namespace volshard
