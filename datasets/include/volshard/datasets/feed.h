#pragma once
// What the network is fed, in one place: the cached deterministic prefix
// (load_pair) and the random augmentation after it. `volshard train`,
// `volshard preview`, the Python Loader and bench_pipeline all build their
// pipeline from these, so a preview shows exactly what training feeds.
// Every field is one row of the schema below (for_each_feed_field): its key
// in configs/*.json, RUN/config.json and the Loader's pipeline, its flag,
// help and bounds; feed_from_json reads it, feed_to_json writes it.
//
// The defaults are MONAI's DDP tutorial (ScaleIntensity; RandCropByPosNegLabel,
// RandRotate90). configs/spleen.json and configs/brats.json set the Decathlon
// pipelines: Orientation, Spacing, a CT window or MRI normalisation,
// CropForeground, and (BraTS) RandSpatialCrop, RandFlip per axis,
// RandScaleIntensity, RandShiftIntensity.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/error.h"
#include "volshard/core/field.h"

#include "volshard/datasets/load_pair.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

enum class CropKind {
  kPosNeg,   ///< RandCropByPosNegLabel(pos 1, neg 1, num_samples)
  kSpatial,  ///< RandSpatialCrop of a fixed size, num_samples independent draws
};

/// RandCrop's num_samples: at most this many crops of one volume.
inline constexpr int64_t kMaxCropsPerVolume = 4096;

/// The names of the pipeline's enums' values, as the JSON and the flags spell them.
const std::vector<std::pair<std::string, IntensityKind>>& enum_names(IntensityKind);
const std::vector<std::pair<std::string, LabelMap>>& enum_names(LabelMap);
const std::vector<std::pair<std::string, NormalizeOn>>& enum_names(NormalizeOn);
const std::vector<std::pair<std::string, CropKind>>& enum_names(CropKind);
const std::vector<std::pair<std::string, PaddingMode>>& enum_names(PaddingMode);

struct FeedOptions {
  PrefixOptions prefix;  ///< the deterministic, cached part
  CropKind crop_kind = CropKind::kPosNeg;
  /// Crop size, voxels: one edge (a cube) or three, x,y,z, each >= 1 (BraTS's
  /// 224,224,144; nnU-Net's Hippocampus patch 40,56,40).
  std::vector<int64_t> crop{96};
  int64_t num_samples = 4;       ///< crops per volume, >= 1
  bool allow_smaller = false;    ///< a crop larger than a volume shrinks to it instead of failing
  double rot90_prob = 0.5;       ///< RandRotate90(max_k 3, axes (0, 2)) probability; 0: none
  double flip_prob = 0.0;        ///< RandFlip on each spatial axis on its own; 0: none
  double rand_scale = 0.0;       ///< RandScaleIntensity(factors +-v, prob rand_scale_prob); 0: none
  double rand_shift = 0.0;       ///< RandShiftIntensity(offsets +-v, prob rand_shift_prob); 0: none
  double rand_scale_prob = 1.0;  ///< RandScaleIntensity's prob, in [0, 1]
  double rand_shift_prob = 1.0;  ///< RandShiftIntensity's prob, in [0, 1]
  double noise_prob = 0.0;       ///< RandGaussianNoise(prob, mean 0, std noise_std); 0: none
  double noise_std = 0.1;        ///< its std: the spread is drawn uniform in [0, noise_std)
  double smooth_prob = 0.0;      ///< RandGaussianSmooth(sigma_x/y/z, prob); 0: none
  std::vector<double> smooth_sigma_x{0.25, 1.5};  ///< its sigma range lo, hi, voxels
  std::vector<double> smooth_sigma_y{0.25, 1.5};
  std::vector<double> smooth_sigma_z{0.25, 1.5};
  double contrast_prob = 0.0;  ///< RandAdjustContrast(prob, gamma); 0: none
  /// Its gamma range lo, hi; one value g > 0.5 is (0.5, g), as MONAI reads it.
  std::vector<double> contrast_gamma{0.5, 4.5};
  /// RandBiasField(degree, coeff_range, prob), after the contrast; 0: none.
  double bias_prob = 0.0;
  int64_t bias_degree = 3;  ///< its polynomials' degree (MONAI's default 3)
  /// Its coefficients' range lo, hi (MONAI's coeff_range).
  std::vector<double> bias_coeff{0.0, 0.1};
  /// RandAffine around the crop (MONAI's RandAffine, sampled from the volume
  /// around the crop: transforms/spatial.h warp_view); 0: none.
  double affine_prob = 0.0;
  /// Its ranges, one value (every axis) or one per axis: rotation about x,y,z
  /// in radians, MONAI's six shear coefficients, translation in voxels, and
  /// scale (1 + uniform(-v, v), v < 1).
  std::vector<double> affine_rotate{0.0};
  std::vector<double> affine_shear{0.0};
  std::vector<double> affine_translate{0.0};
  std::vector<double> affine_scale{0.0};
  /// RandAffine's and RandZoom's padding outside the volume (MONAI's default: reflection).
  PaddingMode affine_padding = PaddingMode::kReflection;
  double zoom_prob = 0.0;  ///< RandZoom (isotropic, keep_size) probability; 0: none
  std::vector<double> zoom_range{0.9, 1.1};  ///< its zoom lo,hi (MONAI's min_zoom, max_zoom)
  /// Rand3DElastic in place of RandAffine (affine_prob 0), with the affine_*
  /// ranges: a smoothed random offset field moves each voxel first; 0: none.
  double elastic_prob = 0.0;
  std::vector<double> elastic_sigma{5.0, 8.0};          ///< its smoothing sigma lo,hi, voxels
  std::vector<double> elastic_magnitude{100.0, 200.0};  ///< its offsets' scale lo,hi
  /// The RandAffine/Rand3DElastic/RandZoom step's options, one value expanded to every axis; the
  /// ranges are as validate() accepted them.
  AffineOptions affine() const;
  /// Throws std::invalid_argument naming the field ("--crop=0 must be >= 1"):
  /// the prefix's checks, the schema's bounds (for_each_feed_field), then
  /// what spans fields.
  void validate() const;
  /// The crop's three edges.
  std::array<int64_t, 3> crop_size() const { return cube_or_xyz(crop); }
};

/// A crop edge: at most this many voxels.
inline constexpr int64_t kMaxCropEdge = 4096;

/// The deterministic prefix's fields, shared by train, predict, prepare and the Loader.
template <class Self, class Visit>
void for_each_prefix_field(Self& p, Visit&& visit) {
  using F = Field;
  visit(F("orientation", "Orientation: axis codes such as RAS (empty: as stored)").kept_on_resume(),
        p.orientation);
  visit(F("pixdim", "Spacing: voxel size in mm, x,y,z (empty: as stored)").kept_on_resume(),
        p.pixdim);
  visit(F("intensity",
          "intensity transform (scale: to [0, 1]; range: --a-min.. window; "
          "normalize: z-score; in training per crop or per volume: normalize_on)")
            .kept_on_resume(),
        p.intensity);
  visit(F("a_min", "range: input window low, e.g. -57 HU").kept_on_resume().finite(),
        p.range.a_min);
  visit(F("a_max", "range: input window high, e.g. 164 HU").kept_on_resume().finite(),
        p.range.a_max);
  visit(F("b_min", "range: output low").kept_on_resume().finite(), p.range.b_min);
  visit(F("b_max", "range: output high").kept_on_resume().finite(), p.range.b_max);
  visit(F("clip", "range: clamp the output to [b_min, b_max]").kept_on_resume(), p.range.clip);
  visit(F("nonzero", "normalize: statistics over non-zero voxels only").kept_on_resume(),
        p.normalize.nonzero);
  visit(F("channel_wise", "normalize: each channel on its own").kept_on_resume(),
        p.normalize.channel_wise);
  visit(F("normalize_on",
          "normalize: statistics of each training crop (MONAI's BraTS) or of the whole "
          "volume (nnU-Net); validation always takes the whole volume's")
            .kept_on_resume()
            .for_training_only(),
        p.normalize_on);
  visit(F("crop_foreground",
          "CropForeground: cut the volume to image > 0 (where prefix_order puts it)")
            .kept_on_resume(),
        p.crop_foreground);
  visit(F("foreground_margin", "CropForeground margin, voxels").kept_on_resume().at_least(0),
        p.foreground_margin);
  visit(F("spatial_pad",
          "SpatialPad (symmetric, zeros) after CropForeground to at least this size, one value or "
          "x,y,z, so crops of any volume batch (training only; empty: none)")
            .kept_on_resume()
            .for_training_only(),
        p.spatial_pad);
  visit(F("prefix_order",
          "the order of orientation, spacing, intensity, crop_foreground, each named once, as "
          "MONAI's Compose lists them (MONAI's spleen notebook: intensity,crop_foreground,"
          "orientation,spacing); a step runs only when its options ask for it")
            .kept_on_resume(),
        p.order);
  visit(F("labels",
          "label mapping (classes: indices as stored; brats: labels 1/2/4, "
          "decathlon_brats: Task01's 1/2/3, as TC, WT, ET channels)")
            .kept_on_resume(),
        p.labels);
  visit(F("num_classes",
          "labels must be integers in [0, num_classes) (0: any); volshard train sets it from "
          "the network")
            .from_network()
            .at_least(0)
            .not_in_cache_key(),  // a check of the stored labels: no value changes
        p.num_classes);
}

/// The pipeline's fields (the prefix's, then the random steps'): the schema
/// that `volshard train`'s flags and RUN/config.json, configs/*.json, the
/// Python Loader and the benchmark all read. A new pipeline option is a
/// member of FeedOptions or PrefixOptions and one row here.
template <class Self, class Visit>
void for_each_feed_field(Self& f, Visit&& visit) {
  using F = Field;
  for_each_prefix_field(f.prefix, visit);
  visit(F("crop_kind", "random crop (pos_neg: RandCropByPosNegLabel; spatial: RandSpatialCrop)")
            .kept_on_resume(),
        f.crop_kind);
  visit(F("crop", "crop size, voxels: one edge (a cube) or x,y,z (224,224,144)").kept_on_resume(),
        f.crop);
  visit(
      F("num_samples", "crops per volume").kept_on_resume().at_least(1).at_most(kMaxCropsPerVolume),
      f.num_samples);
  // Every random step's options are kept on resume too: a resumed run that
  // drew its crops, turns, flips or intensities otherwise would not be the run.
  visit(F("allow_smaller", "crops larger than a volume shrink to it").kept_on_resume(),
        f.allow_smaller);
  visit(
      F("affine_prob", "RandAffine probability, sampled from the volume around the crop (0: none)")
          .kept_on_resume()
          .at_least(0)
          .at_most(1),
      f.affine_prob);
  visit(F("affine_rotate",
          "RandAffine rotation range about x,y,z, radians: uniform(-v, v) (one value: each axis)")
            .kept_on_resume(),
        f.affine_rotate);
  visit(F("affine_shear", "RandAffine shear range, MONAI's six coefficients (one value: each)")
            .kept_on_resume(),
        f.affine_shear);
  visit(F("affine_translate", "RandAffine translation range x,y,z, voxels (one value: each axis)")
            .kept_on_resume(),
        f.affine_translate);
  visit(F("affine_scale",
          "RandAffine scale range x,y,z: 1 + uniform(-v, v), v < 1 (one value: each axis)")
            .kept_on_resume(),
        f.affine_scale);
  visit(F("affine_padding",
          "RandAffine and RandZoom padding outside the volume (zeros, border, reflection)")
            .kept_on_resume(),
        f.affine_padding);
  visit(F("zoom_prob", "RandZoom probability, one zoom for all axes (0: none)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.zoom_prob);
  visit(F("zoom_range", "RandZoom zoom lo,hi (> 1 enlarges; MONAI's min_zoom, max_zoom)")
            .kept_on_resume(),
        f.zoom_range);
  visit(F("elastic_prob",
          "Rand3DElastic probability, in place of RandAffine (--affine-prob 0) with the "
          "--affine-* ranges, sampled around the crop (0: none)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.elastic_prob);
  visit(F("elastic_sigma", "Rand3DElastic smoothing sigma lo,hi, voxels (MONAI's sigma_range)")
            .kept_on_resume(),
        f.elastic_sigma);
  visit(F("elastic_magnitude", "Rand3DElastic offset scale lo,hi (MONAI's magnitude_range)")
            .kept_on_resume(),
        f.elastic_magnitude);
  visit(
      F("rot90_prob", "RandRotate90 probability (0: none)").kept_on_resume().at_least(0).at_most(1),
      f.rot90_prob);
  visit(F("flip_prob", "RandFlip probability, each axis on its own (0: none)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.flip_prob);
  visit(F("rand_scale", "RandScaleIntensity factor range +-v (0: none)")
            .kept_on_resume()
            .at_least(0)
            .below(1),
        f.rand_scale);
  visit(F("rand_shift", "RandShiftIntensity offset range +-v (0: none)")
            .kept_on_resume()
            .at_least(0)
            .finite(),
        f.rand_shift);
  visit(F("rand_scale_prob", "RandScaleIntensity probability (MONAI's prob; 1: every crop)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.rand_scale_prob);
  visit(F("rand_shift_prob", "RandShiftIntensity probability (MONAI's prob; 1: every crop)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.rand_shift_prob);
  visit(F("noise_prob", "RandGaussianNoise probability (0: none)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.noise_prob);
  visit(F("noise_std", "RandGaussianNoise std: each crop's spread uniform in [0, v), mean 0")
            .kept_on_resume()
            .at_least(0)
            .finite(),
        f.noise_std);
  visit(F("smooth_prob", "RandGaussianSmooth probability (0: none)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.smooth_prob);
  visit(F("smooth_sigma_x",
          "RandGaussianSmooth sigma range along x, lo,hi voxels (0 <= lo <= hi <= 100)")
            .kept_on_resume(),
        f.smooth_sigma_x);
  visit(
      F("smooth_sigma_y", "RandGaussianSmooth sigma range along y, lo,hi voxels").kept_on_resume(),
      f.smooth_sigma_y);
  visit(
      F("smooth_sigma_z", "RandGaussianSmooth sigma range along z, lo,hi voxels").kept_on_resume(),
      f.smooth_sigma_z);
  visit(F("contrast_prob", "RandAdjustContrast probability (0: none)")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.contrast_prob);
  visit(F("contrast_gamma",
          "RandAdjustContrast gamma range lo,hi (0 < lo <= hi; one value g > 0.5: 0.5,g as MONAI)")
            .kept_on_resume(),
        f.contrast_gamma);
  visit(F("bias_prob", "RandBiasField probability (0: none); after the contrast")
            .kept_on_resume()
            .at_least(0)
            .at_most(1),
        f.bias_prob);
  visit(F("bias_degree", "RandBiasField polynomials' degree (MONAI's degree)")
            .kept_on_resume()
            .at_least(1)
            .at_most(kMaxBiasFieldDegree),
        f.bias_degree);
  visit(F("bias_coeff", "RandBiasField coefficients' range lo,hi (MONAI's coeff_range)")
            .kept_on_resume(),
        f.bias_coeff);
}

/// The keys of for_each_feed_field, in its order.
const std::vector<std::string>& feed_keys();

/// `feed` with the keys a JSON object sets (as configs/*.json and
/// RUN/config.json spell them: enums by name, lists as arrays, a
/// comma-separated string or one number), each converted by its field's
/// type, then validated. Throws std::invalid_argument "<who>key=value ..."
/// for a value of the wrong type or an unknown enum name, and naming a key
/// outside the schema ("unknown pipeline key").
FeedOptions feed_from_json(const std::string& json_object, const std::string& who,
                           const FeedOptions& base = {});

/// The pipeline keys of a training config file (configs/spleen.json,
/// RUN/config.json) over `base`; its other keys (network, optimiser) are
/// skipped. Throws std::runtime_error naming the file if it cannot be read.
FeedOptions feed_from_config(const std::string& path, const FeedOptions& base = {});

/// Every field of `feed` as a JSON object (keys in table order).
std::string feed_to_json(const FeedOptions& feed);

/// The random steps after the cached prefix: the crop (num_samples of them),
/// RandZoom and RandAffine (one resampling around the crop), RandRotate90, RandFlip per axis,
/// NormalizeIntensity when the prefix's intensity is kNormalize on kCrop (on each crop, as MONAI's
/// BraTS pipeline), RandGaussianNoise, RandGaussianSmooth, RandScaleIntensity, RandShiftIntensity,
/// RandAdjustContrast (nnU-Net's and MONAI's DynUNet order: noise, blur, brightness,
/// contrast/gamma); each step only when configured. Step t draws from its own stream (Compose), in
/// the order docs/reproducibility.md lists.
Compose feed_augmentation(const FeedOptions& options);

/// A training volume's spatial shape after the prefix, named by its file.
struct VolumeShape {
  std::string source;
  std::array<int64_t, 3> shape{};
};
/// Unless options.allow_smaller: throws std::invalid_argument when a volume
/// is smaller than the crop on some side, naming how many, the first eight
/// with their shapes, and the smallest of the set with what fixes it
/// ("train: --crop=96 is larger than 2 training volume(s) <after>: a.nii.gz
/// (64x64x40), ...; the smallest ... use --crop <= 40, --spatial-pad 96 or
/// --allow-smaller"). `after` says which steps made the shapes.
void check_crop_fits(const FeedOptions& options, const std::vector<VolumeShape>& volumes,
                     const std::string& after);

/// The deterministic prefix as training caches it: the prefix options, label
/// indices (for RandCropByPosNegLabel), file-order image when nothing
/// resamples it, compact uint8 labels (the loader's batches widen them to
/// float32), normalisation deferred to the crops unless normalize_on is kVolume.
PairOptions feed_prefix(const FeedOptions& options = {});

/// The prefix for validation and prediction: the whole volume, normalised,
/// C order, no label indices, no spatial_pad.
PairOptions whole_volume_prefix(const PrefixOptions& prefix);

}  // namespace volshard
