#pragma once
// A folder of MONAI-style synthetic image/label pairs, as MONAI's DDP tutorial
// writes them (what `volshard synth` does).

#include <cstdint>
#include <functional>
#include <string>

#include "volshard/volume_io/synthetic.h"

namespace volshard {

struct SynthOptions {
  std::string out_dir;
  int64_t count = 40;
  SyntheticOptions volume;  ///< the tutorial: 128^3, num_seg_classes 1
  uint64_t seed = 0;
  int64_t threads = 2;  ///< output does not depend on it
  /// Called after each volume is written with (done, count); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

/// synth's --count: at most this many volumes (a disk's worth of 128^3 ones).
inline constexpr int64_t kMaxSynthCount = 100000;

/// Writes img{i}.nii.gz (float32) and seg{i}.nii.gz (int32) for i in [0,
/// count), identity affine as MONAI's tutorial, volume i from
/// NumpyRandomState(synthetic_volume_seed(seed, i)). Creates out_dir. Each
/// file is written atomically; throws std::runtime_error naming the file.
void write_synthetic_dataset(const SynthOptions& options);

}  // namespace volshard
