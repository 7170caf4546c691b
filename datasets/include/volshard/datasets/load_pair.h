#pragma once
// The deterministic prefix of a pipeline for one image/label pair: LoadImage,
// EnsureChannelFirst, then (as configured) Orientation, Spacing, an intensity
// transform, CropForeground and the label's mapping, and the label's
// foreground/background indices RandCropByPosNegLabel needs. What a
// SampleCache holds and what the trainer, `volshard preview`, `volshard
// prepare` and the benchmark load.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/sample.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

enum class IntensityKind {
  kNone,
  kScale,      ///< ScaleIntensity to [0, 1] (the tutorial)
  kRange,      ///< ScaleIntensityRange (CT windows)
  kNormalize,  ///< NormalizeIntensity (MRI)
};

/// Where NormalizeIntensity takes its statistics in training.
enum class NormalizeOn {
  kCrop,    ///< each random crop (MONAI's BraTS pipeline); validation: the whole volume
  kVolume,  ///< the whole volume, once, in the cached prefix (nnU-Net's per-case z-score)
};

enum class LabelMap {
  kClasses,         ///< class indices as stored (0: background)
  kBrats,           ///< BraTS challenge labels 1/2/4 as TC, WT, ET channels
  kDecathlonBrats,  ///< Decathlon Task01 labels 1/2/3 as TC, WT, ET channels
};

/// A step of the prefix that PrefixOptions::order places.
enum class PrefixStep { kOrientation, kSpacing, kIntensity, kCropForeground };

/// SpatialPad's largest size per axis, voxels.
inline constexpr int64_t kMaxPadEdge = 4096;

/// The user-facing part of the prefix: what `--config` files set.
struct PrefixOptions {
  std::string orientation;     ///< axcodes such as "RAS"; empty: as stored
  std::vector<double> pixdim;  ///< Spacing, mm per axis (3 values); empty: as stored
  IntensityKind intensity = IntensityKind::kScale;
  ScaleIntensityRangeOptions range;     ///< kRange
  NormalizeIntensityOptions normalize;  ///< kNormalize
  NormalizeOn normalize_on = NormalizeOn::kCrop;  ///< kNormalize in training
  bool crop_foreground = false;  ///< CropForeground on image > 0 (after the intensity transform)
  int64_t foreground_margin = 0;
  /// SpatialPad(symmetric, zeros) of image and label after CropForeground to
  /// at least these sizes (one value: every axis; 0: that axis as it is), so
  /// that crops of any volume batch together. Training only: validation and
  /// prediction see the volume as it is (the sliding window pads itself).
  std::vector<int64_t> spatial_pad;
  LabelMap labels = LabelMap::kClasses;
  /// The order the steps run in, as MONAI's Compose lists them: each of
  /// "orientation", "spacing", "intensity" and "crop_foreground" once (a step
  /// runs only when its options ask for it). The default is the order this
  /// project always had; MONAI's spleen notebook windows and crops first:
  /// intensity, crop_foreground, orientation, spacing. The label follows every
  /// step that moves the grid (nearest for Spacing), then the label mapping;
  /// spatial_pad comes last.
  std::vector<std::string> order{"orientation", "spacing", "intensity", "crop_foreground"};
  /// > 0: every stored label value must be an integer in [0, num_classes)
  /// (checked as it is read; the file and value named otherwise).
  int64_t num_classes = 0;
  /// Throws std::invalid_argument naming the field ("--pixdim=1,0,2 ...").
  void validate() const;
  /// `order` as steps; throws std::invalid_argument naming --prefix-order
  /// unless it names each step once.
  std::vector<PrefixStep> steps() const;
  /// spatial_pad as three sizes ({0, 0, 0}: none).
  std::array<int64_t, 3> pad_size() const;
  /// What the options compute: every row of for_each_prefix_field in the
  /// cache's key (Field::in_cache_key), as JSON (part of the cache key).
  std::string key() const;
};

struct PairOptions {
  PrefixOptions prefix;
  /// kNormalize is left to the augmentation (MONAI's BraTS pipeline normalises
  /// each crop); validation and prediction normalise the whole volume.
  bool defer_normalize = false;
  bool label_indices = true;  ///< fill Sample::indices (the crops' scan of the label, done once)
  int64_t max_voxels = int64_t{4} << 30;  ///< per file, as ReadOptions::max_voxels
  /// The image's layout. The default keeps the file's voxel order when
  /// nothing resamples or reorients it (no transposing copy; the crops
  /// transpose as they copy). The label is always C order: its index scan and
  /// most crops read it row by row.
  VolumeLayout image_layout = VolumeLayout::kFileOrderView;
  /// The label as uint8 when its values are integers in [0, 255] (else
  /// float32): a quarter of the memory, and faster to scan and crop. The
  /// DataLoader's batches hold float32 labels either way.
  bool compact_label = false;
  /// What the options compute, for CacheOptions::config_key: changing an
  /// option that changes the sample changes the key.
  std::string config_key() const;
};

/// How the prefix moved an image's grid, to move its label the same way and
/// map a prediction back onto the file's own grid (MONAI's Invertd), in any
/// order of the steps.
struct PrefixTrace {
  /// A step that changed the grid (one that left it as it was is not kept).
  struct Move {
    PrefixStep kind;  ///< kOrientation, kSpacing or kCropForeground
    Grid before, after;
    VoxelBox box;  ///< kCropForeground: its box in `before`
  };
  Grid stored;              ///< the file's grid
  std::vector<Move> moves;  ///< in the order they ran
  /// The grid the prefix ends on: the last move's, else the stored one.
  const Grid& prepared() const { return moves.empty() ? stored : moves.back().after; }
};

/// The image's prefix alone (no label): for prediction. `trace` may be null.
SpatialImage prepare_image(const Volume& image, const PairOptions& options,
                           PrefixTrace* trace = nullptr);

/// A prediction (C x the prepared grid) back on the file's grid, the moves
/// undone last to first: a crop padded with zeros, a Spacing resampled back
/// (trilinear, or nearest for label maps), an Orientation undone. C x stored
/// shape.
at::Tensor invert_prefix(const at::Tensor& prediction, const PrefixTrace& trace,
                         Interpolation mode);

/// Reads the pair as float32 C x X x Y x Z tensors (MONAI LoadImage's dtype,
/// channel-first; a compact label may be uint8), applies the prefix, and scans
/// the label. meta.index = index, meta.source = pair.image, meta.affine the
/// prepared image's. Throws std::runtime_error naming the file for a bad
/// file or label value, and naming both files and shapes if their spatial
/// shapes differ. Thread-safe.
Sample load_pair(const ImageLabelPair& pair, int64_t index, const PairOptions& options = {});

}  // namespace volshard
