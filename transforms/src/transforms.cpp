#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "volshard/sampler/log.h"

namespace volshard {
namespace {

std::string shape_text(const std::array<int64_t, 3>& s) {
  return "(" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(s[2]) + ")";
}

std::array<int64_t, 3> spatial_shape(const at::Tensor& t) {
  if (t.dim() != 4) {
    throw std::invalid_argument("expected a C x X x Y x Z tensor, got " + std::to_string(t.dim()) + " dims");
  }
  return {t.size(1), t.size(2), t.size(3)};
}

void check_probability(const char* what, double p) {
  if (!(p >= 0.0 && p <= 1.0)) throw std::invalid_argument(std::string(what) + "=" + std::to_string(p) + " must be in [0, 1]");
}

void check_spatial_axis(const char* what, int64_t axis) {
  if (axis < 0 || axis > 2) throw std::invalid_argument(std::string(what) + "=" + std::to_string(axis) + " must be in [0, 2]");
}

// A crop, rotation or flip of a contiguous C x X x Y x Z volume is a strided
// view of each channel: out[i0][i1][i2] = in[base + i0*s0 + i1*s1 + i2*s2],
// strides possibly negative. gather() materialises it in one pass; ATen's
// generic strided copy reads with a large stride in its innermost loop for
// rot90 with k = 1 or 3, which is what made those 2-5 ms per 96^3 crop.
struct SpatialView {
  int64_t base = 0;
  std::array<int64_t, 3> size{};
  std::array<int64_t, 3> stride{};
};

SpatialView whole(const std::array<int64_t, 3>& shape) {
  return {0, shape, {shape[1] * shape[2], shape[2], 1}};
}

void gather_channel(const float* in, const SpatialView& v, float* out) {
  const auto [n0, n1, n2] = v.size;
  const auto [s0, s1, s2] = v.stride;
  if (s2 == 1 || s2 == -1) {  // rows: copy forwards or backwards
    for (int64_t i0 = 0; i0 < n0; ++i0) {
      for (int64_t i1 = 0; i1 < n1; ++i1) {
        const float* src = in + v.base + i0 * s0 + i1 * s1;
        float* dst = out + (i0 * n1 + i1) * n2;
        if (s2 == 1) {
          std::memcpy(dst, src, static_cast<size_t>(n2) * sizeof(float));
        } else {
          for (int64_t i2 = 0; i2 < n2; ++i2) dst[i2] = src[-i2];
        }
      }
    }
    return;
  }
  // The input's unit stride lies on dim 0 or 1: walk tiles of (that dim, dim
  // 2) so each cache line read serves a whole tile row.
  constexpr int64_t kTile = 16;
  const bool unit0 = s0 == 1 || s0 == -1;
  const int64_t na = unit0 ? n0 : n1, nb = unit0 ? n1 : n0;  // a: tiled with dim 2, b: outer
  const int64_t sa = unit0 ? s0 : s1, sb = unit0 ? s1 : s0;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t a0 = 0; a0 < na; a0 += kTile) {
      const int64_t a1 = std::min(a0 + kTile, na);
      for (int64_t c0 = 0; c0 < n2; c0 += kTile) {
        const int64_t c1 = std::min(c0 + kTile, n2);
        for (int64_t a = a0; a < a1; ++a) {
          const int64_t i0 = unit0 ? a : b, i1 = unit0 ? b : a;
          const float* src = in + v.base + a * sa + b * sb;
          float* dst = out + (i0 * n1 + i1) * n2;
          for (int64_t c = c0; c < c1; ++c) dst[c] = src[c * s2];
        }
      }
    }
  }
}

bool gatherable(const at::Tensor& t) {
  return t.defined() && t.scalar_type() == at::kFloat && t.dim() == 4 && t.is_contiguous();
}

at::Tensor gather(const at::Tensor& t, const SpatialView& v) {
  at::Tensor out = at::empty({t.size(0), v.size[0], v.size[1], v.size[2]}, t.options());
  const int64_t in_channel = t.size(1) * t.size(2) * t.size(3);
  const int64_t out_channel = v.size[0] * v.size[1] * v.size[2];
  const float* in = t.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t c = 0; c < t.size(0); ++c) gather_channel(in + c * in_channel, v, o + c * out_channel);
  return out;
}

// torch.rot90(x, k, (1 + p, 1 + q)) as a view: k = 1 is flip(q) then
// transpose(p, q), k = 2 flips both, k = 3 is flip(p) then transpose(p, q).
SpatialView rot90_view(const std::array<int64_t, 3>& shape, int64_t k, int64_t p, int64_t q) {
  SpatialView v = whole(shape);
  const auto in = v.stride;
  const auto up = static_cast<size_t>(p), uq = static_cast<size_t>(q);
  switch (((k % 4) + 4) % 4) {
    case 1:
      v.stride[up] = -in[uq];
      v.base += (shape[uq] - 1) * in[uq];
      v.stride[uq] = in[up];
      std::swap(v.size[up], v.size[uq]);
      break;
    case 2:
      v.stride[up] = -in[up];
      v.base += (shape[up] - 1) * in[up];
      v.stride[uq] = -in[uq];
      v.base += (shape[uq] - 1) * in[uq];
      break;
    case 3:
      v.stride[up] = in[uq];
      v.stride[uq] = -in[up];
      v.base += (shape[up] - 1) * in[up];
      std::swap(v.size[up], v.size[uq]);
      break;
    default:
      break;
  }
  return v;
}

}  // namespace

at::Tensor scale_intensity(const at::Tensor& image, const ScaleIntensityOptions& options) {
  const at::Tensor x = image.to(at::kFloat);
  if (x.numel() == 0) return x.clone();
  const auto minmax = at::aminmax(x);
  const float lo = std::get<0>(minmax).item<float>();
  const float hi = std::get<1>(minmax).item<float>();
  if (hi - lo == 0.0f) return x * static_cast<float>(options.minv);  // constant image
  // In float32 like MONAI's rescale_array, (x - min) / (max - min) * (maxv - minv) + minv;
  // NaN propagates to every voxel. One pass over contiguous data instead of four.
  const float range = hi - lo;
  const auto scale = static_cast<float>(options.maxv - options.minv);
  const auto offset = static_cast<float>(options.minv);
  if (!x.is_contiguous()) return ((x - lo) / range) * scale + offset;
  at::Tensor out = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
  if (scale == 1.0f && offset == 0.0f) {  // * 1 and + 0 are exact: skip them
    for (int64_t i = 0; i < n; ++i) o[i] = (in[i] - lo) / range;
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = (in[i] - lo) / range * scale + offset;
  }
  return out;
}

void PosNegCropOptions::validate() const {
  if (!(pos >= 0.0) || !(neg >= 0.0) || !(pos + neg > 0.0)) {
    throw std::invalid_argument("RandCropByPosNegLabel: pos=" + std::to_string(pos) + " and neg=" + std::to_string(neg) +
                                " must be >= 0 with pos + neg > 0");
  }
  if (num_samples < 1) {
    throw std::invalid_argument("RandCropByPosNegLabel: num_samples=" + std::to_string(num_samples) + " must be >= 1");
  }
}

LabelIndices label_indices(const at::Tensor& label, const at::Tensor* image, double image_threshold) {
  (void)spatial_shape(label);
  // One-hot labels: channel 0 is the background and does not count.
  const at::Tensor l = (label.size(0) > 1 ? label.narrow(0, 1, label.size(0) - 1) : label).to(at::kFloat).contiguous();
  const int64_t channels = l.size(0);
  const int64_t voxels = l.size(1) * l.size(2) * l.size(3);
  if (voxels > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument("label_indices: " + std::to_string(voxels) + " voxels exceed int32 indices");
  }
  at::Tensor img;
  if (image != nullptr) img = image->to(at::kFloat).contiguous();
  const float* lp = l.data_ptr<float>();
  const float* ip = image != nullptr ? img.data_ptr<float>() : nullptr;
  const int64_t image_channels = image != nullptr ? img.size(0) : 0;
  LabelIndices out;
  if (channels == 1 && ip == nullptr) {
    // The common case (one label channel, no image threshold): count, then
    // fill exactly sized lists, instead of growing two vectors voxel by voxel.
    int64_t nonzero = 0;
    for (int64_t v = 0; v < voxels; ++v) nonzero += lp[v] != 0.0f ? 1 : 0;
    out.foreground.resize(static_cast<size_t>(nonzero));
    out.background.resize(static_cast<size_t>(voxels - nonzero));
    int32_t* fg = out.foreground.data();
    int32_t* bg = out.background.data();
    for (int64_t v = 0; v < voxels; ++v) {
      if (lp[v] != 0.0f) {
        *fg++ = static_cast<int32_t>(v);
      } else {
        *bg++ = static_cast<int32_t>(v);
      }
    }
    return out;
  }
  for (int64_t v = 0; v < voxels; ++v) {
    bool fg = false;
    for (int64_t c = 0; c < channels && !fg; ++c) fg = lp[c * voxels + v] != 0.0f;
    if (fg) {
      out.foreground.push_back(static_cast<int32_t>(v));
      continue;
    }
    bool bg = ip == nullptr;
    for (int64_t c = 0; c < image_channels && !bg; ++c) bg = ip[c * voxels + v] > image_threshold;
    if (bg) out.background.push_back(static_cast<int32_t>(v));
  }
  return out;
}

std::array<int64_t, 3> crop_size(const std::array<int64_t, 3>& shape, const PosNegCropOptions& options) {
  std::array<int64_t, 3> size{};
  bool larger = false;
  for (size_t a = 0; a < 3; ++a) {
    size[a] = options.spatial_size[a] <= 0 ? shape[a] : options.spatial_size[a];
    if (size[a] > shape[a]) {
      larger = true;
      if (options.allow_smaller) size[a] = shape[a];
    }
  }
  if (larger && !options.allow_smaller) {
    throw std::invalid_argument("RandCropByPosNegLabel: the crop ROI " + shape_text(options.spatial_size) +
                                " is larger than the image " + shape_text(shape) + " (set allow_smaller)");
  }
  return size;
}

int64_t clamp_crop_centre(int64_t centre, int64_t size, int64_t length) {
  const int64_t lo = size / 2;
  // MONAI: uint16(L + 1 - s / 2) with float division, truncated.
  auto hi = static_cast<int64_t>(static_cast<double>(length) + 1.0 - static_cast<double>(size) / 2.0);
  if (lo == hi) ++hi;
  return std::min(std::max(centre, lo), hi - 1);
}

std::vector<CropParams> sample_pos_neg_crops(const std::array<int64_t, 3>& shape, const LabelIndices& indices,
                                             const PosNegCropOptions& options, StreamRng& rng,
                                             std::atomic<bool>* warned) {
  options.validate();
  const std::array<int64_t, 3> size = crop_size(shape, options);
  if (indices.empty()) throw std::invalid_argument("RandCropByPosNegLabel: No sampling location available.");
  double pos_ratio = options.pos / (options.pos + options.neg);
  if (indices.foreground.empty() || indices.background.empty()) {
    pos_ratio = indices.foreground.empty() ? 0.0 : 1.0;
    if (warned == nullptr || !warned->exchange(true)) {
      warn("RandCropByPosNegLabel: " + std::to_string(indices.foreground.size()) + " foreground and " +
           std::to_string(indices.background.size()) + " background voxels; unable to generate class balanced "
           "samples, setting pos_ratio to " + (pos_ratio == 0.0 ? "0" : "1"));
    }
  }
  std::vector<CropParams> crops;
  for (int64_t k = 0; k < options.num_samples; ++k) {
    CropParams crop;
    crop.size = size;
    crop.foreground = rng.uniform_double() < pos_ratio;
    const auto& pool = crop.foreground ? indices.foreground : indices.background;
    int64_t flat = pool[static_cast<size_t>(rng.below(pool.size()))];
    // C order: the last spatial axis varies fastest.
    const std::array<int64_t, 3> voxel{flat / (shape[1] * shape[2]), (flat / shape[2]) % shape[1], flat % shape[2]};
    crop.voxel = voxel;
    for (size_t a = 0; a < 3; ++a) {
      crop.centre[a] = clamp_crop_centre(voxel[a], size[a], shape[a]);
      crop.start[a] = crop.centre[a] - size[a] / 2;
    }
    crops.push_back(crop);
  }
  return crops;
}

Sample apply_crop(const Sample& sample, const CropParams& crop, int64_t patch_index) {
  const auto shape = spatial_shape(sample.image);
  const auto cut = [&](const at::Tensor& t) {
    if (gatherable(t)) {
      SpatialView v = whole(spatial_shape(t));
      for (size_t a = 0; a < 3; ++a) v.base += crop.start[a] * v.stride[a];
      v.size = crop.size;
      return gather(t, v);
    }
    return t.slice(1, crop.start[0], crop.start[0] + crop.size[0])
        .slice(2, crop.start[1], crop.start[1] + crop.size[1])
        .slice(3, crop.start[2], crop.start[2] + crop.size[2])
        .contiguous();
  };
  Sample out;
  out.image = cut(sample.image);
  out.label = cut(sample.label);
  out.meta = sample.meta;
  out.meta.patch_index = patch_index;
  out.meta.cropped = true;
  out.meta.foreground_centre = crop.foreground;
  out.meta.crop_centre = crop.centre;
  out.meta.crop_start = crop.start;
  out.meta.source_shape = shape;
  return out;
}

CropParams sample_spatial_crop(const std::array<int64_t, 3>& shape, const std::array<int64_t, 3>& size,
                               StreamRng& rng) {
  CropParams crop;
  crop.size = size;
  for (size_t a = 0; a < 3; ++a) {
    if (size[a] < 1 || size[a] > shape[a]) {
      throw std::invalid_argument("RandSpatialCrop: size " + shape_text(size) + " must fit the image " +
                                  shape_text(shape));
    }
    crop.start[a] = rng.uniform_int(0, shape[a] - size[a]);
    crop.centre[a] = crop.start[a] + size[a] / 2;
  }
  crop.voxel = crop.centre;
  return crop;
}

void Rotate90Options::validate() const {
  check_probability("RandRotate90: prob", prob);
  if (max_k < 1) throw std::invalid_argument("RandRotate90: max_k=" + std::to_string(max_k) + " must be >= 1");
  check_spatial_axis("RandRotate90: spatial_axes[0]", spatial_axes[0]);
  check_spatial_axis("RandRotate90: spatial_axes[1]", spatial_axes[1]);
  if (spatial_axes[0] == spatial_axes[1]) throw std::invalid_argument("RandRotate90: spatial_axes must differ");
}

Rotate90Params sample_rotate90(const Rotate90Options& options, StreamRng& rng) {
  Rotate90Params p;
  p.k = 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(options.max_k)));
  p.apply = rng.uniform_double() < options.prob;
  return p;
}

Sample apply_rotate90(Sample sample, const Rotate90Params& params, const Rotate90Options& options) {
  if (!params.apply || params.k % 4 == 0) return sample;
  const std::vector<int64_t> dims{1 + options.spatial_axes[0], 1 + options.spatial_axes[1]};
  const auto rotate = [&](const at::Tensor& t) {
    if (!gatherable(t)) return at::rot90(t, params.k, dims).contiguous();
    return gather(t, rot90_view(spatial_shape(t), params.k, options.spatial_axes[0], options.spatial_axes[1]));
  };
  sample.image = rotate(sample.image);
  sample.label = rotate(sample.label);
  sample.meta.rot90_k = params.k % 4;
  sample.meta.rot90_axes = options.spatial_axes;
  return sample;
}

void FlipOptions::validate() const {
  check_probability("RandFlip: prob", prob);
  for (int64_t a : spatial_axes) check_spatial_axis("RandFlip: spatial_axis", a);
}

bool sample_flip(const FlipOptions& options, StreamRng& rng) { return rng.uniform_double() < options.prob; }

Sample apply_flip(Sample sample, bool apply, const FlipOptions& options) {
  if (!apply || options.spatial_axes.empty()) return sample;
  std::vector<int64_t> dims;
  for (int64_t a : options.spatial_axes) {
    dims.push_back(1 + a);
    sample.meta.flipped[static_cast<size_t>(a)] = !sample.meta.flipped[static_cast<size_t>(a)];
  }
  const auto flip = [&](const at::Tensor& t) {
    if (!gatherable(t)) return at::flip(t, dims);
    const auto shape = spatial_shape(t);
    SpatialView v = whole(shape);
    for (int64_t a : options.spatial_axes) {
      const auto ua = static_cast<size_t>(a);
      if (v.stride[ua] < 0) continue;  // an axis listed twice flips once, as at::flip refuses duplicates
      v.base += (shape[ua] - 1) * v.stride[ua];
      v.stride[ua] = -v.stride[ua];
    }
    return gather(t, v);
  };
  sample.image = flip(sample.image);
  sample.label = flip(sample.label);
  return sample;
}

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

class RandCropByPosNegLabel final : public Transform {
 public:
  explicit RandCropByPosNegLabel(PosNegCropOptions o) : options_(o) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    const auto shape = spatial_shape(sample.image);
    if (spatial_shape(sample.label) != shape) {
      throw std::invalid_argument("RandCropByPosNegLabel: image " + shape_text(shape) + " and label " +
                                  shape_text(spatial_shape(sample.label)) + " differ in spatial shape");
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
    for (size_t k = 0; k < crops.size(); ++k) out.push_back(apply_crop(sample, crops[k], static_cast<int64_t>(k)));
    return out;
  }
  std::string name() const override { return "RandCropByPosNegLabel"; }

 private:
  PosNegCropOptions options_;
  mutable std::atomic<bool> warned_{false};
};

class RandSpatialCrop final : public Transform {
 public:
  explicit RandSpatialCrop(std::array<int64_t, 3> size) : size_(size) {}
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    return {apply_crop(sample, sample_spatial_crop(spatial_shape(sample.image), size_, rng), 0)};
  }
  std::string name() const override { return "RandSpatialCrop"; }

 private:
  std::array<int64_t, 3> size_;
};

class RandRotate90 final : public Transform {
 public:
  explicit RandRotate90(Rotate90Options o) : options_(o) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    return {apply_rotate90(std::move(sample), sample_rotate90(options_, rng), options_)};
  }
  std::string name() const override { return "RandRotate90"; }

 private:
  Rotate90Options options_;
};

class RandFlip final : public Transform {
 public:
  explicit RandFlip(FlipOptions o) : options_(std::move(o)) { options_.validate(); }
  std::vector<Sample> operator()(Sample sample, StreamRng& rng) const override {
    return {apply_flip(std::move(sample), sample_flip(options_, rng), options_)};
  }
  std::string name() const override { return "RandFlip"; }

 private:
  FlipOptions options_;
};

}  // namespace

std::shared_ptr<const Transform> make_scale_intensity(ScaleIntensityOptions o) {
  return std::make_shared<ScaleIntensity>(o);
}
std::shared_ptr<const Transform> make_rand_crop_by_pos_neg_label(PosNegCropOptions o) {
  return std::make_shared<RandCropByPosNegLabel>(o);
}
std::shared_ptr<const Transform> make_rand_spatial_crop(std::array<int64_t, 3> size) {
  return std::make_shared<RandSpatialCrop>(size);
}
std::shared_ptr<const Transform> make_rand_rotate90(Rotate90Options o) { return std::make_shared<RandRotate90>(o); }
std::shared_ptr<const Transform> make_rand_flip(FlipOptions o) { return std::make_shared<RandFlip>(std::move(o)); }

Compose::Compose(std::vector<std::shared_ptr<const Transform>> steps) : steps_(std::move(steps)) {
  for (const auto& s : steps_) {
    if (!s) throw std::invalid_argument("Compose: a step is null");
  }
}

std::vector<Sample> Compose::operator()(Sample sample, uint64_t sample_seed) const {
  std::vector<Sample> current;
  current.push_back(std::move(sample));
  for (size_t t = 0; t < steps_.size(); ++t) {
    StreamRng rng(mix64(sample_seed + (t + 1) * kGoldenGamma));
    std::vector<Sample> next;
    for (auto& s : current) {
      for (auto& out : (*steps_[t])(std::move(s), rng)) next.push_back(std::move(out));
    }
    current = std::move(next);
  }
  return current;
}

Compose tutorial_augmentation(std::array<int64_t, 3> crop, int64_t num_samples) {
  PosNegCropOptions c;
  c.spatial_size = crop;
  c.num_samples = num_samples;
  Rotate90Options r;
  r.prob = 0.5;
  r.spatial_axes = {0, 2};
  return Compose({make_rand_crop_by_pos_neg_label(c), make_rand_rotate90(r)});
}

}  // namespace volshard
