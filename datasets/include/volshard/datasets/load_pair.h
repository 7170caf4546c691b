#pragma once
// The deterministic prefix of the MONAI tutorial's pipeline for one
// image/label pair (LoadImage, EnsureChannelFirst, ScaleIntensity, and the
// label's foreground/background indices RandCropByPosNegLabel needs): what a
// SampleCache holds and what the trainer, `volshard preview` and the
// benchmark load.

#include <cstdint>
#include <string>

#include "volshard/datasets/datalist.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/sample.h"

namespace volshard {

struct PairOptions {
  bool scale_intensity = true;  ///< ScaleIntensity to [0, 1] on the image
  bool label_indices = true;    ///< fill Sample::indices (the crops' scan of the label, done once)
  int64_t max_voxels = int64_t{4} << 30;  ///< per file, as ReadOptions::max_voxels
  /// The image's layout. The default keeps the file's voxel order (no
  /// transposing copy; the crops transpose as they copy). The label is always
  /// C order: its index scan and most crops read it row by row.
  VolumeLayout image_layout = VolumeLayout::kFileOrderView;
  /// The label as uint8 when its file holds integers in [0, 255] (else
  /// float32): a quarter of the memory, and faster to scan and crop. The
  /// DataLoader's batches hold float32 labels either way.
  bool compact_label = false;
  /// What the options compute, for CacheOptions::config_key: changing an
  /// option that changes the sample changes the key.
  std::string config_key() const;
};

/// Reads the pair as float32 C x X x Y x Z tensors (MONAI LoadImage's dtype,
/// channel-first; a compact label may be uint8), scales the image, and scans
/// the label. meta.index = index,
/// meta.source = pair.image. Throws std::runtime_error naming the file for a
/// bad file, and naming both files and shapes if their spatial shapes differ.
/// Thread-safe.
Sample load_pair(const ImageLabelPair& pair, int64_t index, const PairOptions& options = {});

}  // namespace volshard
