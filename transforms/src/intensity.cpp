// Intensity transforms: ScaleIntensity, ScaleIntensityRange, NormalizeIntensity and the
// random scale and shift's parameters.

#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

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

#include "checks.h"
#include "volshard/core/error.h"
#include "volshard/core/log.h"

namespace volshard {

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

// Both follow MONAI 1.4's tensor code step by step (float32 tensors, Python
// floats as double Scalars), so the same ATen kernels give the same bits.
at::Tensor scale_intensity_range(const at::Tensor& image, const ScaleIntensityRangeOptions& o) {
  const at::Tensor x = image.to(at::kFloat);
  if (o.a_max - o.a_min == 0.0) {
    warn("ScaleIntensityRange: a_min == a_max == " + std::to_string(o.a_min) +
         ": the image is only shifted");
    return x - o.a_min + o.b_min;
  }
  // MONAI's arithmetic, each step rounded to float32 as torch rounds it
  // (the scalars as float32, the width and scale computed in double first):
  // (x - a_min) / (a_max - a_min) * (b_max - b_min) + b_min, then clip (NaN
  // stays NaN). One pass instead of five ATen passes over the volume; no
  // contraction into fused multiply-adds (-ffp-contract=off on this file),
  // so the bits are torch's (MonaiGoldenTest, IntensityTest).
  const at::Tensor in = x.contiguous();
  at::Tensor y = at::empty_like(in);
  const float a_min = static_cast<float>(o.a_min), width = static_cast<float>(o.a_max - o.a_min);
  const float scale = static_cast<float>(o.b_max - o.b_min), b_min = static_cast<float>(o.b_min);
  const float b_max = static_cast<float>(o.b_max);
  const bool clip = o.clip;
  const float* src = in.data_ptr<float>();
  float* dst = y.data_ptr<float>();
  at::parallel_for(0, in.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float v = (src[i] - a_min) / width;
      v = v * scale + b_min;
      if (clip) {  // at::clamp: min(max(v, b_min), b_max), NaN propagated
        v = v != v ? v : (v < b_min ? b_min : v);
        v = v != v ? v : (v > b_max ? b_max : v);
      }
      dst[i] = v;
    }
  });
  return y;
}

namespace {

// One channel (or the whole image): MONAI's NormalizeIntensity._normalize.
at::Tensor normalize(at::Tensor img, bool nonzero, const double* sub, const double* div) {
  at::Tensor slices, masked = img;
  if (nonzero) {
    slices = img != 0;
    masked = img.masked_select(slices);
    if (!slices.any().item<bool>()) return img;
  }
  const double mean = sub != nullptr ? *sub : at::mean(masked).item<double>();
  double std = div != nullptr ? *div : at::std(masked, /*unbiased=*/false).item<double>();
  if (std == 0.0) std = 1.0;
  if (!nonzero) return (img - mean) / std;
  img.masked_scatter_(slices, (masked - mean) / std);
  return img;
}

}  // namespace

at::Tensor normalize_intensity(const at::Tensor& image, const NormalizeIntensityOptions& o) {
  at::Tensor img = image.to(at::kFloat).clone();
  const auto channels = static_cast<size_t>(img.size(0));
  for (const auto* given : {&o.subtrahend, &o.divisor}) {
    const size_t expected = o.channel_wise ? channels : 1;
    if (!given->empty() && given->size() != expected) {
      throw std::invalid_argument(std::string("NormalizeIntensity: ") +
                                  (given == &o.subtrahend ? "subtrahend" : "divisor") + " has " +
                                  std::to_string(given->size()) + " values, the image needs " +
                                  std::to_string(expected) +
                                  (o.channel_wise ? " (one per channel)" : ""));
    }
  }
  auto at_or_null = [](const std::vector<double>& v, size_t i) {
    return v.empty() ? nullptr : &v[i];
  };
  if (!o.channel_wise)
    return normalize(img, o.nonzero, at_or_null(o.subtrahend, 0), at_or_null(o.divisor, 0));
  for (size_t c = 0; c < channels; ++c) {
    const auto i = static_cast<int64_t>(c);
    img[i] =
        normalize(img[i].clone(), o.nonzero, at_or_null(o.subtrahend, c), at_or_null(o.divisor, c));
  }
  return img;
}

void RandIntensityOptions::validate() const {
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi)) {
    throw std::invalid_argument("RandIntensity: lo=" + value_text(lo) +
                                " and hi=" + value_text(hi) + " must be finite with lo <= hi");
  }
  detail::check_probability("RandIntensity: prob", prob);
}

RandIntensityParams sample_rand_intensity(const RandIntensityOptions& options, StreamRng& rng) {
  options.validate();
  RandIntensityParams p;
  p.apply = rng.uniform_double() < options.prob;
  // Drawn whether applied or not (MONAI skips it), so that a step draws the
  // same count every time.
  p.value = options.lo + (options.hi - options.lo) * rng.uniform_double();
  return p;
}

}  // namespace volshard
