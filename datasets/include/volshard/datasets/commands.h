#pragma once
// What the `volshard` tool's subcommands do, as library calls: main() only
// parses flags.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "volshard/datasets/nifti_header.h"
#include "volshard/datasets/synthetic.h"

namespace volshard {

// ---- volshard synth ---------------------------------------------------------

struct SynthOptions {
  std::string out_dir;
  int64_t count = 40;
  SyntheticOptions volume;  ///< the tutorial: 128^3, num_seg_classes 1
  uint64_t seed = 0;
  int64_t threads = 2;  ///< output does not depend on it
  /// Called after each volume is written with (done, count); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

/// Writes img{i}.nii.gz (float32) and seg{i}.nii.gz (int32) for i in [0,
/// count), identity affine as MONAI's tutorial, volume i from
/// NumpyRandomState(synthetic_volume_seed(seed, i)). Creates out_dir. Each
/// file is written atomically; throws std::runtime_error naming the file.
void write_synthetic_dataset(const SynthOptions& options);

// ---- volshard info ------------------------------------------------------------

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
};

/// Reads the file and summarises it; throws std::runtime_error naming the
/// path and field for bad files.
VolumeInfo describe_volume(const std::string& path);

/// One line of JSON.
std::string to_json(const VolumeInfo& info);
/// A few human-readable lines.
std::string to_text(const VolumeInfo& info);

}  // namespace volshard
