#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
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
  return "(" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(s[2]) +
         ")";
}

std::array<int64_t, 3> spatial_shape(const at::Tensor& t) {
  if (t.dim() != 4) {
    throw std::invalid_argument("expected a C x X x Y x Z tensor, got " + std::to_string(t.dim()) +
                                " dims");
  }
  return {t.size(1), t.size(2), t.size(3)};
}

void check_probability(const char* what, double p) {
  if (!(p >= 0.0 && p <= 1.0))
    throw std::invalid_argument(std::string(what) + "=" + std::to_string(p) + " must be in [0, 1]");
}

void check_spatial_axis(const char* what, int64_t axis) {
  if (axis < 0 || axis > 2)
    throw std::invalid_argument(std::string(what) + "=" + std::to_string(axis) +
                                " must be in [0, 2]");
}

}  // namespace

namespace {

// Min and max of n floats, NaN if any is NaN (as at::aminmax), in one pass.
std::pair<float, float> min_max(const float* p, int64_t n) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  bool nan = false;
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi), vnan = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(p + i);
    vlo = _mm_min_ps(vlo, v);
    vhi = _mm_max_ps(vhi, v);
    vnan = _mm_or_ps(vnan, _mm_cmpunord_ps(v, v));
  }
  alignas(16) float l[4], h[4], q[4];
  _mm_store_ps(l, vlo);
  _mm_store_ps(h, vhi);
  _mm_store_ps(q, vnan);
  for (int k = 0; k < 4; ++k) {
    lo = std::min(lo, l[k]);
    hi = std::max(hi, h[k]);
    nan = nan || q[k] != 0.0f;
  }
#endif
  for (; i < n; ++i) {
    nan = nan || std::isnan(p[i]);
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  if (nan)
    return {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  return {lo, hi};
}

// o[i] = (in[i] - lo) / range * scale + offset, each step rounded to float32
// as MONAI's rescale_array does (no fused multiply-add); `affine` false skips
// the * 1 + 0, which is exact. in == o is allowed.
void rescale(const float* in, float* o, int64_t n, float lo, float range, float scale, float offset,
             bool affine) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 vlo = _mm_set1_ps(lo), vrange = _mm_set1_ps(range), vscale = _mm_set1_ps(scale),
               voffset = _mm_set1_ps(offset);
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_div_ps(_mm_sub_ps(_mm_loadu_ps(in + i), vlo), vrange);
    if (affine) v = _mm_add_ps(_mm_mul_ps(v, vscale), voffset);
    _mm_storeu_ps(o + i, v);
  }
#endif
  for (; i < n; ++i) {
    const float v = (in[i] - lo) / range;
    o[i] = affine ? v * scale + offset : v;
  }
}

// Scales the dense float tensor x into out (which may be x): one pass for
// min/max and one over the storage, whatever the strides.
void scale_dense(const at::Tensor& x, at::Tensor& out, const ScaleIntensityOptions& options) {
  const auto scale = static_cast<float>(options.maxv - options.minv);
  const auto offset = static_cast<float>(options.minv);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
  const auto [lo, hi] = min_max(in, n);
  if (hi - lo == 0.0f) {  // constant image: image * minv (zeros by default)
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] * offset;
    return;
  }
  // NaN (lo and hi are NaN then) propagates to every voxel, as in MONAI.
  rescale(in, o, n, lo, hi - lo, scale, offset, !(scale == 1.0f && offset == 0.0f));
}

}  // namespace

at::Tensor scale_intensity(const at::Tensor& image, const ScaleIntensityOptions& options) {
  const at::Tensor x = image.to(at::kFloat);
  if (x.numel() == 0) return x.clone();
  if (!x.is_non_overlapping_and_dense()) {
    const auto minmax = at::aminmax(x);
    const float lo = std::get<0>(minmax).item<float>(), hi = std::get<1>(minmax).item<float>();
    if (hi - lo == 0.0f) return x * static_cast<float>(options.minv);  // constant image
    return ((x - lo) / (hi - lo)) * static_cast<float>(options.maxv - options.minv) +
           static_cast<float>(options.minv);
  }
  at::Tensor out = at::empty_like(x);  // keeps a dense layout's strides
  scale_dense(x, out, options);
  return out;
}

void scale_intensity_(at::Tensor& image, const ScaleIntensityOptions& options) {
  if (image.scalar_type() != at::kFloat || !image.is_non_overlapping_and_dense()) {
    image = scale_intensity(image, options);
    return;
  }
  if (image.numel() > 0) scale_dense(image, image, options);
}

void PosNegCropOptions::validate() const {
  if (!(pos >= 0.0) || !(neg >= 0.0) || !(pos + neg > 0.0)) {
    throw std::invalid_argument("RandCropByPosNegLabel: pos=" + std::to_string(pos) + " and neg=" +
                                std::to_string(neg) + " must be >= 0 with pos + neg > 0");
  }
  if (num_samples < 1) {
    throw std::invalid_argument(
        "RandCropByPosNegLabel: num_samples=" + std::to_string(num_samples) + " must be >= 1");
  }
}

int64_t LabelIndices::background_count() const {
  return voxels > 0 ? voxels - static_cast<int64_t>(foreground.size())
                    : static_cast<int64_t>(background.size());
}

int32_t LabelIndices::background_at(int64_t k) const {
  if (k < 0 || k >= background_count()) {
    throw std::out_of_range("LabelIndices: background voxel " + std::to_string(k) + " of " +
                            std::to_string(background_count()));
  }
  if (voxels == 0) return background[static_cast<size_t>(k)];
  // foreground[j] - j background voxels come before foreground[j], a count
  // that never decreases with j; the k-th background voxel is k plus the
  // number j of foreground voxels with at most k background voxels before.
  int64_t j = 0, hi = static_cast<int64_t>(foreground.size());
  while (j < hi) {
    const int64_t mid = j + (hi - j) / 2;
    if (foreground[static_cast<size_t>(mid)] - mid <= k) {
      j = mid + 1;
    } else {
      hi = mid;
    }
  }
  return static_cast<int32_t>(k + j);
}

namespace {

#if defined(__SSE2__)
// Bit i set when voxel i of the 16 at p is zero (NaN is not zero: foreground,
// as MONAI's `!= 0`).
inline int zero_mask16(const float* p) {
  const __m128 zero = _mm_setzero_ps();
  int m = 0;
  for (int q = 0; q < 4; ++q)
    m |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(p + 4 * q), zero)) << (4 * q);
  return m;
}
inline int zero_mask16(const uint8_t* p) {
  return _mm_movemask_epi8(
      _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_setzero_si128()));
}
#endif

inline int popcount16(unsigned x) {  // no popcnt instruction in the x86-64 baseline
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0F0Fu;
  return static_cast<int>((x + (x >> 8)) & 0x1Fu);
}

// The foreground of one contiguous label channel, counted first so the list
// is allocated once. Labels come in runs, so 16 voxels at a time are usually
// all background (skipped) or all foreground (16 consecutive indices).
template <class T>
std::vector<int32_t> foreground_of(const T* label, int64_t voxels) {
  int64_t count = 0, v = 0;
#if defined(__SSE2__)
  for (; v + 16 <= voxels; v += 16)
    count += 16 - popcount16(static_cast<unsigned>(zero_mask16(label + v)));
#endif
  for (; v < voxels; ++v) count += label[v] != T(0) ? 1 : 0;
  std::vector<int32_t> fg(static_cast<size_t>(count));
  int32_t* out = fg.data();
  v = 0;
#if defined(__SSE2__)
  const __m128i step = _mm_set_epi32(3, 2, 1, 0);
  for (; v + 16 <= voxels; v += 16) {
    const int zero = zero_mask16(label + v);
    if (zero == 0xFFFF) continue;
    if (zero == 0) {
      for (int q = 0; q < 4; ++q) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * q),
                         _mm_add_epi32(_mm_set1_epi32(static_cast<int32_t>(v + 4 * q)), step));
      }
      out += 16;
      continue;
    }
    for (int k = 0; k < 16; ++k) {
      if (!(zero & (1 << k))) *out++ = static_cast<int32_t>(v + k);
    }
  }
#endif
  for (; v < voxels; ++v) {
    if (label[v] != T(0)) *out++ = static_cast<int32_t>(v);
  }
  return fg;
}

}  // namespace

LabelIndices label_indices(const at::Tensor& label, const at::Tensor* image,
                           double image_threshold) {
  (void)spatial_shape(label);
  // One-hot labels: channel 0 is the background and does not count.
  const at::Tensor channels_used =
      label.size(0) > 1 ? label.narrow(0, 1, label.size(0) - 1) : label;
  const int64_t channels = channels_used.size(0);
  const int64_t voxels = label.size(1) * label.size(2) * label.size(3);
  if (voxels > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument("label_indices: " + std::to_string(voxels) +
                                " voxels exceed int32 indices");
  }
  LabelIndices out;
  if (channels == 1 &&
      image == nullptr) {  // the common case: one label channel, background = the rest
    out.voxels = voxels;
    if (channels_used.scalar_type() == at::kByte) {
      const at::Tensor l = channels_used.contiguous();
      out.foreground = foreground_of(l.data_ptr<uint8_t>(), voxels);
    } else {
      const at::Tensor l = channels_used.to(at::kFloat).contiguous();
      out.foreground = foreground_of(l.data_ptr<float>(), voxels);
    }
    return out;
  }
  const at::Tensor l = channels_used.to(at::kFloat).contiguous();
  const float* lp = l.data_ptr<float>();
  at::Tensor img;
  if (image != nullptr) img = image->to(at::kFloat).contiguous();
  const float* ip = image != nullptr ? img.data_ptr<float>() : nullptr;
  const int64_t image_channels = image != nullptr ? img.size(0) : 0;
  if (ip == nullptr) out.voxels = voxels;
  for (int64_t v = 0; v < voxels; ++v) {
    bool fg = false;
    for (int64_t c = 0; c < channels && !fg; ++c) fg = lp[c * voxels + v] != 0.0f;
    if (fg) {
      out.foreground.push_back(static_cast<int32_t>(v));
      continue;
    }
    bool bg = false;
    for (int64_t c = 0; c < image_channels && !bg; ++c) bg = ip[c * voxels + v] > image_threshold;
    if (bg) out.background.push_back(static_cast<int32_t>(v));
  }
  return out;
}

std::array<int64_t, 3> crop_size(const std::array<int64_t, 3>& shape,
                                 const PosNegCropOptions& options) {
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
    throw std::invalid_argument("RandCropByPosNegLabel: the crop ROI " +
                                shape_text(options.spatial_size) + " is larger than the image " +
                                shape_text(shape) + " (set allow_smaller)");
  }
  return size;
}

int64_t clamp_crop_centre(int64_t centre, int64_t size, int64_t length) {
  const int64_t lo = size / 2;
  // MONAI: uint16(L + 1 - s / 2) with float division, truncated.
  auto hi =
      static_cast<int64_t>(static_cast<double>(length) + 1.0 - static_cast<double>(size) / 2.0);
  if (lo == hi) ++hi;
  return std::min(std::max(centre, lo), hi - 1);
}

std::vector<CropParams> sample_pos_neg_crops(const std::array<int64_t, 3>& shape,
                                             const LabelIndices& indices,
                                             const PosNegCropOptions& options, StreamRng& rng,
                                             std::atomic<bool>* warned) {
  options.validate();
  const std::array<int64_t, 3> size = crop_size(shape, options);
  if (indices.empty())
    throw std::invalid_argument("RandCropByPosNegLabel: No sampling location available.");
  double pos_ratio = options.pos / (options.pos + options.neg);
  const int64_t background = indices.background_count();
  if (indices.foreground.empty() || background == 0) {
    pos_ratio = indices.foreground.empty() ? 0.0 : 1.0;
    if (warned == nullptr || !warned->exchange(true)) {
      warn("RandCropByPosNegLabel: " + std::to_string(indices.foreground.size()) +
           " foreground and " + std::to_string(background) +
           " background voxels; unable to generate class balanced "
           "samples, setting pos_ratio to " +
           (pos_ratio == 0.0 ? "0" : "1"));
    }
  }
  std::vector<CropParams> crops;
  for (int64_t k = 0; k < options.num_samples; ++k) {
    CropParams crop;
    crop.size = size;
    crop.foreground = rng.uniform_double() < pos_ratio;
    const int64_t flat =
        crop.foreground
            ? indices.foreground[static_cast<size_t>(rng.below(indices.foreground.size()))]
            : indices.background_at(
                  static_cast<int64_t>(rng.below(static_cast<uint64_t>(background))));
    // C order: the last spatial axis varies fastest.
    const std::array<int64_t, 3> voxel{flat / (shape[1] * shape[2]), (flat / shape[2]) % shape[1],
                                       flat % shape[2]};
    crop.voxel = voxel;
    for (size_t a = 0; a < 3; ++a) {
      crop.centre[a] = clamp_crop_centre(voxel[a], size[a], shape[a]);
      crop.start[a] = crop.centre[a] - size[a] / 2;
    }
    crops.push_back(crop);
  }
  return crops;
}

Sample crop_lazy(const Sample& sample, const CropParams& crop, int64_t patch_index) {
  const auto shape = view_shape(sample);
  Sample out;
  out.image = sample.image;
  out.label = sample.label;
  out.indices = sample.indices;
  out.view = view_of(sample).cropped(crop.start, crop.size);
  out.meta = sample.meta;
  out.meta.patch_index = patch_index;
  out.meta.cropped = true;
  out.meta.foreground_centre = crop.foreground;
  out.meta.crop_centre = crop.centre;
  out.meta.crop_start = crop.start;
  out.meta.source_shape = shape;
  return out;
}

Sample apply_crop(const Sample& sample, const CropParams& crop, int64_t patch_index) {
  return materialize(crop_lazy(sample, crop, patch_index));
}

CropParams sample_spatial_crop(const std::array<int64_t, 3>& shape,
                               const std::array<int64_t, 3>& size, StreamRng& rng) {
  CropParams crop;
  crop.size = size;
  for (size_t a = 0; a < 3; ++a) {
    if (size[a] < 1 || size[a] > shape[a]) {
      throw std::invalid_argument("RandSpatialCrop: size " + shape_text(size) +
                                  " must fit the image " + shape_text(shape));
    }
    crop.start[a] = rng.uniform_int(0, shape[a] - size[a]);
    crop.centre[a] = crop.start[a] + size[a] / 2;
  }
  crop.voxel = crop.centre;
  return crop;
}

void Rotate90Options::validate() const {
  check_probability("RandRotate90: prob", prob);
  if (max_k < 1)
    throw std::invalid_argument("RandRotate90: max_k=" + std::to_string(max_k) + " must be >= 1");
  check_spatial_axis("RandRotate90: spatial_axes[0]", spatial_axes[0]);
  check_spatial_axis("RandRotate90: spatial_axes[1]", spatial_axes[1]);
  if (spatial_axes[0] == spatial_axes[1])
    throw std::invalid_argument("RandRotate90: spatial_axes must differ");
}

Rotate90Params sample_rotate90(const Rotate90Options& options, StreamRng& rng) {
  Rotate90Params p;
  p.k = 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(options.max_k)));
  p.apply = rng.uniform_double() < options.prob;
  return p;
}

Sample rotate90_lazy(Sample sample, const Rotate90Params& params, const Rotate90Options& options) {
  if (!params.apply || params.k % 4 == 0) return sample;
  sample.view =
      view_of(sample).rotated90(params.k, options.spatial_axes[0], options.spatial_axes[1]);
  sample.meta.rot90_k = params.k % 4;
  sample.meta.rot90_axes = options.spatial_axes;
  return sample;
}

Sample apply_rotate90(Sample sample, const Rotate90Params& params, const Rotate90Options& options) {
  return materialize(rotate90_lazy(std::move(sample), params, options));
}

void FlipOptions::validate() const {
  check_probability("RandFlip: prob", prob);
  for (int64_t a : spatial_axes) check_spatial_axis("RandFlip: spatial_axis", a);
}

bool sample_flip(const FlipOptions& options, StreamRng& rng) {
  return rng.uniform_double() < options.prob;
}

Sample flip_lazy(Sample sample, bool apply, const FlipOptions& options) {
  if (!apply || options.spatial_axes.empty()) return sample;
  SpatialMap m = view_of(sample);
  std::array<bool, 3> done{};
  for (int64_t a : options.spatial_axes) {
    const auto ua = static_cast<size_t>(a);
    if (done[ua]) continue;  // an axis listed twice flips once, as at::flip refuses duplicates
    done[ua] = true;
    m = m.flipped(a);
    sample.meta.flipped[ua] = !sample.meta.flipped[ua];
  }
  sample.view = m;
  return sample;
}

Sample apply_flip(Sample sample, bool apply, const FlipOptions& options) {
  return materialize(flip_lazy(std::move(sample), apply, options));
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
      throw std::invalid_argument("RandCropByPosNegLabel: image " + shape_text(shape) +
                                  " and label " + shape_text(spatial_shape(sample.label)) +
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
  explicit RandSpatialCrop(std::array<int64_t, 3> size) : size_(size) {}
  std::vector<Sample> lazy(Sample sample, StreamRng& rng) const override {
    return {crop_lazy(sample, sample_spatial_crop(view_shape(sample), size_, rng), 0)};
  }
  std::string name() const override { return "RandSpatialCrop"; }

 private:
  std::array<int64_t, 3> size_;
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
std::shared_ptr<const Transform> make_rand_rotate90(Rotate90Options o) {
  return std::make_shared<RandRotate90>(o);
}
std::shared_ptr<const Transform> make_rand_flip(FlipOptions o) {
  return std::make_shared<RandFlip>(std::move(o));
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
