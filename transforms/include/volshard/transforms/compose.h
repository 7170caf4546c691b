#pragma once
// Transform steps and Compose: each step a pure function of a per-sample
// seed, steps drawing from streams of their own. (transforms/src/compose.cpp)

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "volshard/core/seed_streams.h"
#include "volshard/transforms/crop.h"
#include "volshard/transforms/intensity.h"
#include "volshard/transforms/sample.h"
#include "volshard/transforms/spatial.h"

namespace volshard {

// ---- Compose --------------------------------------------------------------

/// One step of a pipeline. A step may turn one sample into several (crops).
class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::vector<Sample> operator()(Sample sample, StreamRng& rng) const = 0;
  /// As operator(), with the same draws, but crops, rotations and flips may
  /// stay pending in sample.view (see materialize). The default materialises
  /// the input and calls operator().
  virtual std::vector<Sample> lazy(Sample sample, StreamRng& rng) const;
  virtual std::string name() const = 0;
};

std::shared_ptr<const Transform> make_scale_intensity(ScaleIntensityOptions options = {});
std::shared_ptr<const Transform> make_rand_crop_by_pos_neg_label(PosNegCropOptions options);
/// num_samples independent crops (MONAI's RandSpatialCropSamples; one: RandSpatialCrop).
std::shared_ptr<const Transform> make_rand_spatial_crop(std::array<int64_t, 3> size,
                                                        int64_t num_samples = 1);
std::shared_ptr<const Transform> make_rand_rotate90(Rotate90Options options);
std::shared_ptr<const Transform> make_rand_flip(FlipOptions options);
/// MONAI's RandZoom (keep_size) then RandAffine, one resampling of the crop's
/// neighbourhood (warp_view): must come right after the crop.
std::shared_ptr<const Transform> make_rand_affine(AffineOptions options);
/// MONAI's RandScaleIntensity(factors): image * (1 + factor), in float32.
std::shared_ptr<const Transform> make_rand_scale_intensity(RandIntensityOptions options);
/// MONAI's RandShiftIntensity(offsets): image + offset, in float32.
std::shared_ptr<const Transform> make_rand_shift_intensity(RandIntensityOptions options);
/// MONAI's RandGaussianNoise(prob, mean, std, sample_std): float32 image plus
/// the float32 noise (add_gaussian_noise), its field from the step's stream.
std::shared_ptr<const Transform> make_rand_gaussian_noise(GaussianNoiseOptions options);
/// MONAI's RandGaussianSmooth(sigma_x, sigma_y, sigma_z, prob) (gaussian_smooth).
std::shared_ptr<const Transform> make_rand_gaussian_smooth(GaussianSmoothOptions options);
/// MONAI's RandAdjustContrast(prob, gamma, invert_image, retain_stats) (adjust_contrast).
std::shared_ptr<const Transform> make_rand_adjust_contrast(AdjustContrastOptions options);
/// MONAI's RandBiasField(degree, coeff_range, prob) (apply_bias_field).
std::shared_ptr<const Transform> make_rand_bias_field(BiasFieldOptions options);
/// NormalizeIntensity as a step (on the crop, as MONAI's BraTS pipeline).
std::shared_ptr<const Transform> make_normalize_intensity(NormalizeIntensityOptions options);

/// Runs the steps in order; step t draws from its own stream
/// StreamRng(mix64(sample_seed + (t + 1) * kGoldenGamma)), so changing a later
/// step never changes an earlier one's draws. Output depends only on the
/// sample and its seed: the same on any thread. Thread-safe (const).
class Compose {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> steps);
  std::vector<Sample> operator()(Sample sample, uint64_t sample_seed) const;
  /// The same samples with crops, rotations and flips still pending in
  /// sample.view, so that the pixels move once, into their batch row
  /// (materialize_into). materialize(lazy(s, seed)[k]) == (*this)(s, seed)[k].
  std::vector<Sample> lazy(Sample sample, uint64_t sample_seed) const;
  size_t size() const { return steps_.size(); }

 private:
  std::vector<std::shared_ptr<const Transform>> steps_;
};

}  // namespace volshard
