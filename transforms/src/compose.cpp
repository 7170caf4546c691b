// Transform objects, their factories and Compose.

#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "checks.h"
#include "volshard/core/error.h"

namespace volshard {

using detail::spatial_shape;

namespace {

class ScaleIntensity final : public Transform {
 public:
  explicit ScaleIntensity(ScaleIntensityOptions o) : options_(o) {}
  std::vector<Sample> operator()(Sample sample, StreamRng&) const override {
    sample.image = scale_intensity(sample.image, options_);
    return {std::move(sample)};
  }
  std::string name() const override { return "ScaleIntensity"; }

 private:
  ScaleIntensityOptions options_;
};

// MONAI's RandScaleIntensity (image * (1 + factor)) and RandShiftIntensity
// (image + offset): float32 tensor ops with a double scalar, as MONAI's
// Python float. Not applied: the sample as it came.
class RandIntensity final : public Transform {
 public:
  RandIntensity(RandIntensityOptions o, bool scale) : options_(o), scale_(scale) {
    options_.validate();
  }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    const RandIntensityParams p = sample_rand_intensity(options_, rng);
    if (p.apply) {
      const at::Tensor x = sample.image.to(at::kFloat);
      sample.image = scale_ ? x * (1.0 + p.value) : x + p.value;
      sample.meta.intensity.push_back({name(), {p.value}});
    }
    return {std::move(sample)};
  }
  std::string name() const override { return scale_ ? "RandScaleIntensity" : "RandShiftIntensity"; }

 private:
  RandIntensityOptions options_;
  bool scale_;
};

// MONAI's RandGaussianNoise: the field from the step's stream (the key it
// drew), made on the image's device.
class RandGaussianNoise final : public Transform {
 public:
  explicit RandGaussianNoise(GaussianNoiseOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    const GaussianNoiseParams p = sample_gaussian_noise(options_, rng);
    if (p.apply) {
      sample.image = add_gaussian_noise(sample.image, options_.mean, p.std, p.noise_key);
      sample.meta.intensity.push_back({name(), {p.std}});
    }
    return {std::move(sample)};
  }
  std::string name() const override { return "RandGaussianNoise"; }

 private:
  GaussianNoiseOptions options_;
};

class RandGaussianSmooth final : public Transform {
 public:
  explicit RandGaussianSmooth(GaussianSmoothOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    const GaussianSmoothParams p = sample_gaussian_smooth(options_, rng);
    if (p.apply) {
      sample.image = gaussian_smooth(sample.image, p.sigma);
      sample.meta.intensity.push_back({name(), {p.sigma[0], p.sigma[1], p.sigma[2]}});
    }
    return {std::move(sample)};
  }
  std::string name() const override { return "RandGaussianSmooth"; }

 private:
  GaussianSmoothOptions options_;
};

class RandAdjustContrast final : public Transform {
 public:
  explicit RandAdjustContrast(AdjustContrastOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    const AdjustContrastParams p = sample_adjust_contrast(options_, rng);
    if (p.apply) {
      sample.image =
          adjust_contrast(sample.image, p.gamma, options_.invert_image, options_.retain_stats);
      sample.meta.intensity.push_back({name(), {p.gamma}});
    }
    return {std::move(sample)};
  }
  std::string name() const override { return "RandAdjustContrast"; }

 private:
  AdjustContrastOptions options_;
};

class RandBiasField final : public Transform {
 public:
  explicit RandBiasField(BiasFieldOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    BiasFieldParams p = sample_bias_field(options_, rng);
    if (p.apply) {
      sample.image = apply_bias_field(sample.image, options_.degree, p.coeff);
      sample.meta.intensity.push_back({name(), std::move(p.coeff)});
    }
    return {std::move(sample)};
  }
  std::string name() const override { return "RandBiasField"; }

 private:
  BiasFieldOptions options_;
};

class NormalizeIntensity final : public Transform {
 public:
  explicit NormalizeIntensity(NormalizeIntensityOptions o) : options_(std::move(o)) {}
  std::vector<Sample> operator()(Sample sample, StreamRng&) const override {
    sample.image = normalize_intensity(sample.image, options_);
    return {std::move(sample)};
  }
  std::string name() const override { return "NormalizeIntensity"; }

 private:
  NormalizeIntensityOptions options_;
};

// The samples with their pending views applied.
std::vector<Sample> materialize_each(std::vector<Sample> samples) {
  for (auto& s : samples) s = materialize(std::move(s));
  return samples;
}

// Crops, rotations and flips: lazy() composes the view, operator() applies it.
class Geometric : public Transform {
 public:
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const final {
    return materialize_each(lazy(std::move(sample), rng));
  }
};

class RandCropByPosNegLabel final : public Geometric {
 public:
  explicit RandCropByPosNegLabel(PosNegCropOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> lazy(Sample sample, StreamRng& rng) const override {
    // The label indices index the stored volume: a crop of an already
    // rotated or cropped view is drawn from that view's pixels.
    if (sample.view && !sample.view->is_identity(spatial_shape(sample.image)))
      sample = materialize(std::move(sample));
    sample.view.reset();
    const auto shape = spatial_shape(sample.image);
    if (spatial_shape(sample.label) != shape) {
      throw std::invalid_argument("RandCropByPosNegLabel: image " + shape_text(shape, true) +
                                  " and label " + shape_text(spatial_shape(sample.label), true) +
                                  " differ in spatial shape");
    }
    LabelIndices computed;
    const LabelIndices* indices = sample.indices.get();
    if (indices == nullptr) {
      computed = label_indices(sample.label, options_.use_image_threshold ? &sample.image : nullptr,
                               options_.image_threshold);
      indices = &computed;
    }
    const auto crops = sample_pos_neg_crops(shape, *indices, options_, rng, &warned_);
    std::vector<Sample> out;
    for (size_t k = 0; k < crops.size(); ++k)
      out.push_back(crop_lazy(sample, crops[k], static_cast<int64_t>(k)));
    return out;
  }
  std::string name() const override { return "RandCropByPosNegLabel"; }

 private:
  PosNegCropOptions options_;
  mutable std::atomic<bool> warned_{false};
};

class RandSpatialCrop final : public Geometric {
 public:
  RandSpatialCrop(std::array<int64_t, 3> size, int64_t num_samples)
      : size_(size), num_samples_(num_samples) {
    if (num_samples < 1)
      throw std::invalid_argument("RandSpatialCrop: num_samples=" + std::to_string(num_samples) +
                                  " must be >= 1");
  }
  std::vector<Sample> lazy(Sample sample, StreamRng& rng) const override {
    std::vector<Sample> out;
    for (int64_t k = 0; k < num_samples_; ++k) {
      const CropParams crop = sample_spatial_crop(view_shape(sample), size_, rng);
      out.push_back(crop_lazy(sample, crop, num_samples_ > 1 ? k : 0));
    }
    return out;
  }
  std::string name() const override { return "RandSpatialCrop"; }

 private:
  std::array<int64_t, 3> size_;
  int64_t num_samples_;
};

class RandRotate90 final : public Geometric {
 public:
  explicit RandRotate90(Rotate90Options o) : options_(o) { options_.validate(); }
  std::vector<Sample> lazy(Sample sample, StreamRng& rng) const override {
    return {rotate90_lazy(std::move(sample), sample_rotate90(options_, rng), options_)};
  }
  std::string name() const override { return "RandRotate90"; }

 private:
  Rotate90Options options_;
};

class RandFlip final : public Geometric {
 public:
  explicit RandFlip(FlipOptions o) : options_(std::move(o)) { options_.validate(); }
  std::vector<Sample> lazy(Sample sample, StreamRng& rng) const override {
    return {flip_lazy(std::move(sample), sample_flip(options_, rng), options_)};
  }
  std::string name() const override { return "RandFlip"; }

 private:
  FlipOptions options_;
};

// RandZoom then RandAffine (or Rand3DElastic), one resampling around the
// crop (warp_view): it reads the crop's pending view of the whole volume, so
// it must come before any step that materialises the crop.
class RandAffine final : public Geometric {
 public:
  explicit RandAffine(AffineOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> lazy(Sample sample, StreamRng& rng) const override {
    const AffineParams p = sample_affine(options_, rng);
    if (!p.apply && !p.zoom_apply) return {std::move(sample)};
    at::Tensor offsets;  // Rand3DElastic's, over the output (the view's shape)
    if (p.elastic) {
      const std::array<int64_t, 3> size = view_of(sample).size;
      offsets = elastic_offsets(
          uniform_field({3, size[0], size[1], size[2]}, p.field_key, sample.image.device()),
          p.sigma, p.magnitude);
    }
    sample =
        warp_view(std::move(sample), affine_matrix(p), options_.padding, Gather::kAuto, offsets);
    if (p.zoom_apply) sample.meta.spatial.push_back({"RandZoom", {p.zoom}});
    if (p.elastic) sample.meta.spatial.push_back({"Rand3DElastic", {p.magnitude, p.sigma}});
    if (p.apply) {
      std::vector<double> drawn(p.rotate.begin(), p.rotate.end());
      drawn.insert(drawn.end(), p.shear.begin(), p.shear.end());
      drawn.insert(drawn.end(), p.translate.begin(), p.translate.end());
      drawn.insert(drawn.end(), p.scale.begin(), p.scale.end());
      sample.meta.spatial.push_back({"RandAffine", std::move(drawn)});
    }
    return {std::move(sample)};
  }
  std::string name() const override {
    return options_.elastic_prob > 0 ? "Rand3DElastic" : "RandAffine";
  }

 private:
  AffineOptions options_;
};

}  // namespace

std::shared_ptr<const Transform> make_rand_affine(AffineOptions o) {
  return std::make_shared<RandAffine>(o);
}
std::shared_ptr<const Transform> make_scale_intensity(ScaleIntensityOptions o) {
  return std::make_shared<ScaleIntensity>(o);
}
std::shared_ptr<const Transform> make_rand_crop_by_pos_neg_label(PosNegCropOptions o) {
  return std::make_shared<RandCropByPosNegLabel>(o);
}
std::shared_ptr<const Transform> make_rand_spatial_crop(std::array<int64_t, 3> size,
                                                        int64_t num_samples) {
  return std::make_shared<RandSpatialCrop>(size, num_samples);
}
std::shared_ptr<const Transform> make_rand_rotate90(Rotate90Options o) {
  return std::make_shared<RandRotate90>(o);
}
std::shared_ptr<const Transform> make_rand_flip(FlipOptions o) {
  return std::make_shared<RandFlip>(std::move(o));
}
std::shared_ptr<const Transform> make_rand_scale_intensity(RandIntensityOptions o) {
  return std::make_shared<RandIntensity>(o, /*scale=*/true);
}
std::shared_ptr<const Transform> make_rand_shift_intensity(RandIntensityOptions o) {
  return std::make_shared<RandIntensity>(o, /*scale=*/false);
}
std::shared_ptr<const Transform> make_rand_gaussian_noise(GaussianNoiseOptions o) {
  return std::make_shared<RandGaussianNoise>(o);
}
std::shared_ptr<const Transform> make_rand_gaussian_smooth(GaussianSmoothOptions o) {
  return std::make_shared<RandGaussianSmooth>(o);
}
std::shared_ptr<const Transform> make_rand_adjust_contrast(AdjustContrastOptions o) {
  return std::make_shared<RandAdjustContrast>(o);
}
std::shared_ptr<const Transform> make_rand_bias_field(BiasFieldOptions o) {
  return std::make_shared<RandBiasField>(o);
}
std::shared_ptr<const Transform> make_normalize_intensity(NormalizeIntensityOptions o) {
  return std::make_shared<NormalizeIntensity>(std::move(o));
}

Compose::Compose(std::vector<std::shared_ptr<const Transform>> steps) : steps_(std::move(steps)) {
  for (const auto& s : steps_) {
    if (!s) throw std::invalid_argument("Compose: a step is null");
  }
}

std::vector<Sample> Transform::lazy(Sample sample, StreamRng& rng) const {
  return (*this)(materialize(std::move(sample)), rng);
}

std::vector<Sample> Compose::lazy(Sample sample, uint64_t sample_seed) const {
  std::vector<Sample> current;
  current.push_back(std::move(sample));
  for (size_t t = 0; t < steps_.size(); ++t) {
    StreamRng rng(mix64(sample_seed + (t + 1) * kGoldenGamma));
    std::vector<Sample> next;
    for (auto& s : current) {
      for (auto& out : steps_[t]->lazy(std::move(s), rng)) next.push_back(std::move(out));
    }
    current = std::move(next);
  }
  return current;
}

std::vector<Sample> Compose::operator()(Sample sample, uint64_t sample_seed) const {
  return materialize_each(lazy(std::move(sample), sample_seed));
}

}  // namespace volshard
