#pragma once
// What `volshard info` says about a NIfTI file: shape, dtype, spacing, affine
// and value range.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "volshard/volume_io/nifti_header.h"

namespace volshard {

struct VolumeInfo {
  std::string path;
  std::vector<int64_t> shape;  ///< as stored (NIfTI dims, not channel-first)
  std::string dtype;           ///< on-disk datatype
  int version = 1;
  std::array<double, 3> spacing_mm{};
  Affine affine{};
  bool scaled = false;                         ///< scl_slope/scl_inter applied
  double min = 0, max = 0, mean = 0, sum = 0;  ///< of the (scaled) data, NaN/Inf skipped
  int64_t nonfinite = 0;
  std::string orientation;  ///< nibabel's aff2axcodes, joined: "RAS", "LPS", ... (core/orientation.h)
  /// An integer file's distinct values, ascending (the first 256 of them when
  /// there are more, see labels_complete); float or scaled data list them only
  /// when every finite value is an integer (a label saved as float32).
  std::optional<std::vector<int64_t>> labels;
  bool labels_complete = true;
};


/// Reads the file and summarises it in one pass over the voxels in their
/// stored type (no float copy): about the reader's own memory. Throws
/// std::runtime_error naming the path and field for bad files.
VolumeInfo describe_volume(const std::string& path);

/// One line of JSON (the path escaped by printable(): valid UTF-8 always).
std::string to_json(const VolumeInfo& info);
/// A few human-readable lines.
std::string to_text(const VolumeInfo& info);

}  // namespace volshard
