// Intensity transforms: ScaleIntensity, ScaleIntensityRange, NormalizeIntensity, the
// random scale and shift's parameters, RandGaussianNoise, RandGaussianSmooth and
// RandAdjustContrast.

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
#include <vector>

#include "checks.h"
#include "simd.h"
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

// ---- RandGaussianNoise ------------------------------------------------------

void GaussianNoiseOptions::validate() const {
  detail::check_probability("RandGaussianNoise: prob", prob);
  if (!std::isfinite(mean))
    throw std::invalid_argument("RandGaussianNoise: mean=" + value_text(mean) + " must be finite");
  if (!(std >= 0.0 && std::isfinite(std)))
    throw std::invalid_argument("RandGaussianNoise: std=" + value_text(std) +
                                " must be finite and >= 0");
}

GaussianNoiseParams sample_gaussian_noise(const GaussianNoiseOptions& options, StreamRng& rng) {
  options.validate();
  GaussianNoiseParams p;
  p.apply = rng.uniform_double() < options.prob;
  // Every draw is made whether applied or not, so that a step draws the same
  // count every time; MONAI's R.uniform(0, std) is 0 + (std - 0) * random().
  const double u = rng.uniform_double();
  p.std = options.sample_std ? 0.0 + (options.std - 0.0) * u : options.std;
  p.noise_key = rng.next_u64();
  return p;
}

namespace {

using detail::kTwoPi;

// x * c mod 2^32 for x, c in [0, 2^32), in int64 tensors without overflow:
// c's halves keep every product below 2^49.
at::Tensor mul_mod32(const at::Tensor& x, uint32_t c) {
  const auto lo = static_cast<int64_t>(c & 0xffffu), hi = static_cast<int64_t>(c >> 16);
  return (x * lo + at::bitwise_left_shift(at::bitwise_and(x * hi, 0xffff), 16))
      .bitwise_and_(int64_t{0xffffffff});
}

// Chris Wellons' lowbias32 integer hash, a bijection of [0, 2^32), in tensor
// ops (any device) and on the host: the same integers.
at::Tensor hash32(at::Tensor x) {
  x = at::bitwise_xor(x, at::bitwise_right_shift(x, 16));
  x = mul_mod32(x, 0x7feb352du);
  x = at::bitwise_xor(x, at::bitwise_right_shift(x, 15));
  x = mul_mod32(x, 0x846ca68bu);
  return at::bitwise_xor(x, at::bitwise_right_shift(x, 16));
}

inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// 32 uniform bits per index, two keyed rounds of the hash.
at::Tensor keyed_bits(const at::Tensor& index, uint32_t k0, uint32_t k1) {
  return hash32(at::bitwise_xor(hash32(at::bitwise_xor(index, int64_t{k0})), int64_t{k1}));
}

inline uint32_t keyed_bits(uint32_t index, uint32_t k0, uint32_t k1) {
  return hash32(hash32(index ^ k0) ^ k1);
}

// The field's pairs in tensor ops: each a function of its index alone.
at::Tensor noise_pairs_tensor_ops(int64_t pairs, uint64_t key, uint64_t second,
                                  c10::Device device) {
  const auto i = at::arange(pairs, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor a = keyed_bits(i, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  const at::Tensor b =
      keyed_bits(i, static_cast<uint32_t>(second), static_cast<uint32_t>(second >> 32));
  // u1 in (0, 1) (never 0: log), u2 in [0, 1), in float64.
  const at::Tensor u1 = (a.to(at::kDouble) + 0.5) * 0x1.0p-32;
  const at::Tensor theta = b.to(at::kDouble) * (0x1.0p-32 * kTwoPi);
  const at::Tensor r = at::sqrt(at::log(u1) * -2.0);
  return at::stack({r * at::cos(theta), r * at::sin(theta)}, 1).view(-1);
}

// fdlibm's log (e_log.c) for normal x > 0, without its special cases.
double fdlibm_log(double x) {
  using namespace detail::fdlibm;
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  auto hx = static_cast<int64_t>(bits >> 32);  // the high word
  int64_t k = (hx >> 20) - 1023;
  hx &= 0x000fffff;
  const int64_t i = (hx + 0x95f64) & 0x100000;  // x / 2 where its mantissa is above sqrt(2)
  bits = (static_cast<uint64_t>(hx | (i ^ 0x3ff00000)) << 32) | (bits & 0xffffffffu);
  std::memcpy(&x, &bits, sizeof x);
  k += i >> 20;
  const double f = x - 1.0, s = f / (2.0 + f), dk = static_cast<double>(k);
  const double z = s * s, w = z * z;
  const double t1 = w * (kLg2 + w * (kLg4 + w * kLg6));
  const double t2 = z * (kLg1 + w * (kLg3 + w * (kLg5 + w * kLg7)));
  const double R = t2 + t1;
  if (((hx - 0x6147a) | (0x6b851 - hx)) > 0) {
    const double hfsq = 0.5 * f * f;
    return dk * kLn2Hi - ((hfsq - (s * (hfsq + R) + dk * kLn2Lo)) - f);
  }
  return dk * kLn2Hi - ((s * (f - R) - dk * kLn2Lo) - f);
}

// sin and cos of t in [0, 2 pi): t less the nearest multiple of pi/2 in two
// parts (exact for these t), fdlibm's kernels (k_sin.c, k_cos.c), the quadrant.
void fdlibm_sincos(double t, double& sine, double& cosine) {
  using namespace detail::fdlibm;
  const int n = static_cast<int>(t * kInvPio2 + 0.5);
  const double fn = n;
  const double x = (t - fn * kPio2Hi) - fn * kPio2Lo;
  const double z = x * x;
  const double sx = x + z * x * (kS1 + z * (kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)))));
  const double r = z * (kC1 + z * (kC2 + z * (kC3 + z * (kC4 + z * (kC5 + z * kC6)))));
  const double hz = 0.5 * z, w = 1.0 - hz;
  const double cx = w + (((1.0 - w) - hz) + z * r);
  switch (n & 3) {
    case 0: sine = sx, cosine = cx; break;
    case 1: sine = cx, cosine = -sx; break;
    case 2: sine = -sx, cosine = -cx; break;
    default: sine = -cx, cosine = sx; break;
  }
}

// The same pairs on the host, one pass and no temporaries: the tensor ops'
// integers, their scalings exact or rounded alike, and Box-Muller through
// fdlibm's log, sin and cos (float64 operations only, the same in both loops),
// so the bits depend on neither libm nor the CPU, and differ from a device's
// log, cos and sin by their rounding. Pairs [begin, end) of a field of n
// values: value 2i and 2i + 1 (pair i's, the latter only below n) at
// out[2 (i - begin)] and the next. With `avx2`, whole pairs four at a time.
void noise_pairs_range(double* out, int64_t begin, int64_t end, int64_t n, uint64_t key,
                       uint64_t second, bool avx2) {
  const auto k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  const auto s0 = static_cast<uint32_t>(second), s1 = static_cast<uint32_t>(second >> 32);
  int64_t i = begin;
#if defined(VOLSHARD_AVX2)
  if (avx2) {  // the pairs with both values, in fours
    const int64_t whole = std::min(end, n / 2);
    if (whole > begin) {
      i = begin + (whole - begin) / 4 * 4;
      detail::noise_pairs_avx2(out, begin, i, k0, k1, s0, s1);
    }
  }
#else
  (void)avx2;  // no AVX2 loop in this build (avx2_available() is false)
#endif
  for (; i < end; ++i) {
    const auto index = static_cast<uint32_t>(i);
    const double u1 = (static_cast<double>(keyed_bits(index, k0, k1)) + 0.5) * 0x1.0p-32;
    const double theta = static_cast<double>(keyed_bits(index, s0, s1)) * (0x1.0p-32 * kTwoPi);
    const double r = std::sqrt(fdlibm_log(u1) * -2.0);
    double sine, cosine;
    fdlibm_sincos(theta, sine, cosine);
    out[2 * (i - begin)] = r * cosine;
    if (2 * i + 1 < n) out[2 * (i - begin) + 1] = r * sine;
  }
}

// The field's value count: pair i is hashed from i, a 32-bit index.
int64_t noise_values(at::IntArrayRef shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  if ((n + 1) / 2 > (int64_t{1} << 32)) {
    throw std::invalid_argument("RandGaussianNoise: " + std::to_string(n) +
                                " values are more than the noise field's 2^33");
  }
  return n;
}

}  // namespace

at::Tensor gaussian_noise_field(at::IntArrayRef shape, uint64_t key, c10::Device device,
                                Gather how) {
  if (device.is_cpu() && how == Gather::kAuto)
    return detail::gaussian_noise_field(shape, key, detail::HostLoop::kAuto);
  const int64_t n = noise_values(shape);
  // Box-Muller gives two values per pair of uniforms; pair i is hashed from i.
  // Value 2i is pair i's cosine, 2i + 1 its sine: value k depends on k alone,
  // not on how many values there are.
  return noise_pairs_tensor_ops((n + 1) / 2, key, mix64(key + kGoldenGamma), device)
      .narrow(0, 0, n)
      .view(shape);
}

at::Tensor detail::gaussian_noise_field(at::IntArrayRef shape, uint64_t key, HostLoop loop) {
  const int64_t n = noise_values(shape);
  at::Tensor z = at::empty(shape, at::TensorOptions().dtype(at::kDouble));
  double* out = z.data_ptr<double>();
  const uint64_t second = mix64(key + kGoldenGamma);
  const bool avx2 = loop == HostLoop::kAuto && avx2_available();
  at::parallel_for(0, (n + 1) / 2, int64_t{1} << 14, [&](int64_t begin, int64_t end) {
    noise_pairs_range(out + 2 * begin, begin, end, n, key, second, avx2);
  });
  return z;
}

at::Tensor add_gaussian_noise(const at::Tensor& image, double mean, double std, uint64_t key) {
  const at::Tensor x = image.to(at::kFloat);
  if (!x.is_cpu())
    return add_gaussian_noise(x, mean, std, gaussian_noise_field(x.sizes(), key, x.device()));
  const int64_t n = noise_values(x.sizes());
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const uint64_t second = mix64(key + kGoldenGamma);
  const bool avx2 = detail::avx2_available();
  // The field a chunk of pairs at a time (64 KiB, in cache), added as made:
  // add_gaussian_noise's arithmetic on gaussian_noise_field's values.
  constexpr int64_t kChunk = int64_t{1} << 12;
  at::parallel_for(0, (n + 1) / 2, kChunk, [&](int64_t begin, int64_t end) {
    std::vector<double> field(2 * kChunk);
    for (int64_t first = begin; first < end; first += kChunk) {
      const int64_t last = std::min(end, first + kChunk);
      noise_pairs_range(field.data(), first, last, n, key, second, avx2);
      const int64_t value = 2 * first, values = std::min(2 * last, n) - value;
      for (int64_t v = 0; v < values; ++v)
        o[value + v] = in[value + v] + static_cast<float>(field[v] * std + mean);
    }
  });
  return out;
}

at::Tensor add_gaussian_noise(const at::Tensor& image, double mean, double std,
                              const at::Tensor& z) {
  const at::Tensor x = image.to(at::kFloat);
  if (z.sizes() != x.sizes()) {
    throw std::invalid_argument(
        "RandGaussianNoise: the noise's shape " + shape_text(z.sizes().data(), z.sizes().size()) +
        " is not the image's " + shape_text(x.sizes().data(), x.sizes().size()));
  }
  // numpy's normal(loc, scale) is loc + scale * gauss in float64; MONAI then
  // casts the field to float32 and adds it in float32.
  if (x.is_cpu() && z.is_cpu() && z.scalar_type() == at::kDouble) {
    // The same arithmetic in one pass (no fused multiply-add: -ffp-contract=off).
    const at::Tensor xc = x.contiguous(), zc = z.contiguous();
    at::Tensor out = at::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    const double* noise = zc.data_ptr<double>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, xc.numel(), int64_t{1} << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = in[i] + static_cast<float>(noise[i] * std + mean);
    });
    return out;
  }
  return x + (z.to(at::kDouble) * std + mean).to(at::kFloat);
}

// ---- RandGaussianSmooth -----------------------------------------------------

void GaussianSmoothOptions::validate() const {
  static const char* const kAxis[] = {"sigma_x", "sigma_y", "sigma_z"};
  for (size_t d = 0; d < 3; ++d) {
    const auto [lo, hi] = sigma[d];
    if (!(lo >= 0.0 && lo <= hi && hi <= kMaxSmoothSigma)) {
      throw std::invalid_argument(std::string("RandGaussianSmooth: ") + kAxis[d] + "=(" +
                                  value_text(lo) + ", " + value_text(hi) +
                                  ") must have 0 <= lo <= hi <= " + value_text(kMaxSmoothSigma));
    }
  }
  detail::check_probability("RandGaussianSmooth: prob", prob);
}

GaussianSmoothParams sample_gaussian_smooth(const GaussianSmoothOptions& options, StreamRng& rng) {
  options.validate();
  GaussianSmoothParams p;
  p.apply = rng.uniform_double() < options.prob;
  for (size_t d = 0; d < 3; ++d) {  // MONAI's R.uniform(lo, hi): lo + (hi - lo) * random()
    const auto [lo, hi] = options.sigma[d];
    p.sigma[d] = lo + (hi - lo) * rng.uniform_double();
  }
  return p;
}

at::Tensor uniform_field(at::IntArrayRef shape, uint64_t key, c10::Device device, Gather how) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  if (n > (int64_t{1} << 32)) {
    throw std::invalid_argument("Rand3DElastic: " + std::to_string(n) +
                                " offsets are more than the field's 2^32");
  }
  const auto k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  if (device.is_cpu() && how == Gather::kAuto) {  // the tensor ops' exact arithmetic, one pass
    at::Tensor u = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
    float* out = u.data_ptr<float>();
    at::parallel_for(0, n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint32_t bits = keyed_bits(static_cast<uint32_t>(i), k0, k1);
        out[i] = static_cast<float>(static_cast<double>(bits) * 0x1.0p-31 - 1.0);
      }
    });
    return u;
  }
  const auto i = at::arange(n, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor bits = keyed_bits(i, k0, k1);
  // 2 u - 1 with u = bits / 2^32 in [0, 1): exact in float64, then rounded once.
  return (bits.to(at::kDouble) * 0x1.0p-31 - 1.0).to(at::kFloat).view(shape);
}

at::Tensor gaussian_kernel_1d(double sigma, c10::Device device, double truncated) {
  const auto f = at::TensorOptions().dtype(at::kFloat).device(device);
  // MONAI keeps sigma as a float32 tensor; the tail is from that value in double.
  const at::Tensor s = at::scalar_tensor(sigma, f);
  const auto s32 = static_cast<double>(static_cast<float>(sigma));
  const auto tail = static_cast<int64_t>(std::max(s32 * truncated, 0.5) + 0.5);
  const at::Tensor x = at::arange(-tail, tail + 1, f);
  // 0.70710678 / |sigma| is torch's __rtruediv__: reciprocal, then times.
  const at::Tensor t = at::reciprocal(at::abs(s)) * 0.70710678;
  const at::Tensor out = ((t * (x + 0.5)).erf() - (t * (x - 0.5)).erf()) * 0.5;
  return at::clamp_min(out, 0);
}

namespace {

// out[0, m) += w * in[0, m): each value rounded after the product and after
// the sum (no fused multiply-add), so the vector and scalar steps agree.
inline void add_scaled(float* __restrict out, float w, const float* __restrict in, int64_t m) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 vw = _mm_set1_ps(w);
  for (; i + 8 <= m; i += 8) {
    const __m128 a = _mm_add_ps(_mm_loadu_ps(out + i), _mm_mul_ps(vw, _mm_loadu_ps(in + i)));
    const __m128 b =
        _mm_add_ps(_mm_loadu_ps(out + i + 4), _mm_mul_ps(vw, _mm_loadu_ps(in + i + 4)));
    _mm_storeu_ps(out + i, a);
    _mm_storeu_ps(out + i + 4, b);
  }
#endif
  for (; i < m; ++i) out[i] += w * in[i];
}

// One axis of the separable filter on a contiguous outer x n x inner block:
// out[o, i, :] = sum over k of w[k] in[o, i + k - pad, :], zero outside
// [0, n) (the zero padding), the taps summed in order k = 0, 1, ... as whole
// rows (inner > 1) or shifted runs of the row (inner == 1). `out` starts at 0.
// With `avx2`, along a row (inner == 1) each output value's taps are summed
// in a register, eight values at a time, in the same order from the same 0
// (simd.h): the same bits.
void filter_axis(const float* in, float* out, int64_t outer, int64_t n, int64_t inner,
                 const std::vector<float>& w, bool avx2) {
  const auto taps = static_cast<int64_t>(w.size()), pad = (taps - 1) / 2;
  at::parallel_for(0, outer, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> padded;  // filter_row_avx2's, one allocation a chunk of rows
    for (int64_t o = begin; o < end; ++o) {
      const float* src = in + o * n * inner;
      float* dst = out + o * n * inner;
      if (inner == 1) {
#if defined(VOLSHARD_AVX2)
        if (avx2) {
          detail::filter_row_avx2(src, dst, n, w.data(), taps, padded);
          continue;
        }
#else
        (void)avx2;  // no AVX2 loop in this build (avx2_available() is false)
#endif
        for (int64_t k = 0; k < taps; ++k) {
          const int64_t lo = std::max<int64_t>(0, pad - k), hi = std::min(n, n + pad - k);
          if (lo < hi) add_scaled(dst + lo, w[k], src + lo + k - pad, hi - lo);
        }
        continue;
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < taps; ++k) {
          const int64_t j = i + k - pad;
          if (j >= 0 && j < n) add_scaled(dst + i * inner, w[k], src + j * inner, inner);
        }
      }
    }
  });
}

// MONAI's separable filtering on the host: X, then Y, then Z, in float32 as
// its convolutions, three passes over the volume and no padded copies.
at::Tensor gaussian_smooth_host(const at::Tensor& x, const std::array<at::Tensor, 3>& kernels,
                                bool avx2) {
  const int64_t c = x.size(0), n0 = x.size(1), n1 = x.size(2), n2 = x.size(3);
  std::array<std::vector<float>, 3> w;
  for (size_t d = 0; d < 3; ++d) {
    const at::Tensor k = kernels[d].contiguous();
    w[d].assign(k.data_ptr<float>(), k.data_ptr<float>() + k.numel());
  }
  const at::Tensor in = x.contiguous();
  at::Tensor a = at::zeros_like(in), b = at::zeros_like(in);
  filter_axis(in.data_ptr<float>(), a.data_ptr<float>(), c, n0, n1 * n2, w[0], avx2);
  filter_axis(a.data_ptr<float>(), b.data_ptr<float>(), c * n0, n1, n2, w[1], avx2);
  a.zero_();
  filter_axis(b.data_ptr<float>(), a.data_ptr<float>(), c * n0 * n1, n2, 1, w[2], avx2);
  return a;
}

}  // namespace

at::Tensor detail::gaussian_smooth(const at::Tensor& image, const std::array<double, 3>& sigma,
                                   double truncated, HostLoop loop) {
  if (!image.is_cpu() || image.dim() != 4) {
    throw std::invalid_argument("RandGaussianSmooth: the host passes take a C x X x Y x Z CPU "
                                "tensor, not " + std::to_string(image.dim()) + " dims on " +
                                image.device().str());
  }
  std::array<at::Tensor, 3> kernels;
  for (size_t d = 0; d < 3; ++d)
    kernels[d] = gaussian_kernel_1d(sigma[d], image.device(), truncated);
  return gaussian_smooth_host(image.to(at::kFloat), kernels,
                              loop == HostLoop::kAuto && avx2_available());
}

at::Tensor gaussian_smooth(const at::Tensor& image, const std::array<double, 3>& sigma,
                           double truncated, Gather how) {
  if (image.is_cpu() && image.dim() == 4 && how == Gather::kAuto)
    return detail::gaussian_smooth(image, sigma, truncated, detail::HostLoop::kAuto);
  std::array<at::Tensor, 3> kernels;
  std::array<int64_t, 3> pad{};
  for (size_t d = 0; d < 3; ++d) {
    kernels[d] = gaussian_kernel_1d(sigma[d], image.device(), truncated);
    pad[d] = (kernels[d].size(0) - 1) / 2;
  }
  const at::Tensor x = image.to(at::kFloat).unsqueeze(0);  // 1 x C x X x Y x Z
  const int64_t channels = x.size(1);
  // On a GPU: MONAI's separable_filtering pads Z, Y, then X with zeros and
  // convolves X, then Y, then Z (its recursion), each a grouped convolution
  // of the whole padded volume; the same calls give the same sums.
  at::Tensor y = at::constant_pad_nd(x, {pad[2], pad[2], 0, 0, 0, 0});
  y = at::constant_pad_nd(y, {0, 0, pad[1], pad[1], 0, 0});
  y = at::constant_pad_nd(y, {0, 0, 0, 0, pad[0], pad[0]});
  for (size_t d = 0; d < 3; ++d) {
    std::vector<int64_t> shape{1, 1, 1, 1, 1};
    shape[d + 2] = -1;
    const at::Tensor weight = kernels[d].reshape(shape).repeat({channels, 1, 1, 1, 1});
    const std::array<int64_t, 3> one{1, 1, 1}, none{0, 0, 0};
    y = at::conv3d(y, weight, std::nullopt, one, none, one, channels);
  }
  return y.squeeze(0);
}

// ---- RandAdjustContrast -----------------------------------------------------

void AdjustContrastOptions::validate() const {
  detail::check_probability("RandAdjustContrast: prob", prob);
  if (!(gamma[0] > 0.0 && gamma[0] <= gamma[1] && std::isfinite(gamma[1]))) {
    throw std::invalid_argument("RandAdjustContrast: gamma=(" + value_text(gamma[0]) + ", " +
                                value_text(gamma[1]) + ") must be finite with 0 < lo <= hi");
  }
}

AdjustContrastParams sample_adjust_contrast(const AdjustContrastOptions& options, StreamRng& rng) {
  options.validate();
  AdjustContrastParams p;
  p.apply = rng.uniform_double() < options.prob;
  p.gamma = options.gamma[0] + (options.gamma[1] - options.gamma[0]) * rng.uniform_double();
  return p;
}

at::Tensor adjust_contrast(const at::Tensor& image, double gamma, bool invert_image,
                           bool retain_stats) {
  at::Tensor img = image.to(at::kFloat);
  if (invert_image) img = -img;
  at::Tensor mn, sd;
  if (retain_stats) {
    mn = img.mean();
    sd = img.std();
  }
  // MONAI 1.4 line for line: the range plus epsilon is a float32 tensor made
  // a Python float; the power and the rest are float32 tensor ops.
  const at::Tensor img_min = img.min();
  const at::Tensor img_range = img.max() - img_min;
  const double denominator = (img_range + 1e-7).item<double>();
  at::Tensor ret = at::pow((img - img_min) / denominator, gamma) * img_range + img_min;
  if (retain_stats) {
    ret = ret - ret.mean();
    ret = ret / (ret.std() + 1e-8);
    ret = sd * ret + mn;
  }
  if (invert_image) ret = -ret;
  return ret;
}

void BiasFieldOptions::validate() const {
  detail::check_probability("RandBiasField: prob", prob);
  if (degree < 1 || degree > kMaxBiasFieldDegree) {
    throw std::invalid_argument("RandBiasField: degree=" + std::to_string(degree) +
                                " must be in [1, " + std::to_string(kMaxBiasFieldDegree) + "]");
  }
  if (!(std::isfinite(coeff[0]) && std::isfinite(coeff[1]) && coeff[0] <= coeff[1])) {
    throw std::invalid_argument("RandBiasField: coeff=(" + value_text(coeff[0]) + ", " +
                                value_text(coeff[1]) + ") must be finite with lo <= hi");
  }
}

int64_t bias_field_terms(int64_t degree) { return (degree + 1) * (degree + 2) * (degree + 3) / 6; }

BiasFieldParams sample_bias_field(const BiasFieldOptions& options, StreamRng& rng) {
  options.validate();
  BiasFieldParams p;
  p.apply = rng.uniform_double() < options.prob;
  p.coeff.resize(static_cast<size_t>(bias_field_terms(options.degree)));
  for (double& c : p.coeff)
    c = options.coeff[0] + (options.coeff[1] - options.coeff[0]) * rng.uniform_double();
  return p;
}

namespace {

// numpy's linspace(-1, 1, n, dtype=float32) widened back to float64: i * (2 /
// (n - 1)) - 1 in float64, the last exactly 1, each rounded to float32.
std::vector<double> legendre_coordinates(int64_t n) {
  std::vector<double> x(static_cast<size_t>(n), -1.0);
  if (n < 2) return x;
  const double step = 2.0 / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i)
    x[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(i) * step + -1.0);
  x.back() = 1.0;
  return x;
}

// x / d: by a power of two, the product with its reciprocal, which is the
// same value (both exact, or both the one rounding of x / d) and cheaper.
inline double divide(double x, int64_t d) {
  return (d & (d - 1)) == 0 ? x * (1.0 / static_cast<double>(d)) : x / static_cast<double>(d);
}

// numpy's legval at one point over coefficients c[0], c[stride], ... (n >= 2
// of them): Clenshaw's recursion, operation for operation.
double legval(const double* c, int64_t stride, int64_t n, double x) {
  double c0 = c[(n - 2) * stride], c1 = c[(n - 1) * stride];
  for (int64_t i = 3, nd = n; i <= n; ++i) {
    const double tmp = c0;
    nd -= 1;
    c0 = c[(n - i) * stride] - divide(c1 * static_cast<double>(nd - 1), nd);
    c1 = tmp + divide(c1 * x * static_cast<double>(2 * nd - 1), nd);
  }
  return c0 + c1 * x;
}

// leggrid3d's first two passes (small, on the host): the coefficients along
// z of every (x, y) column, planes[(k * nx + a) * ny + b], and the z
// coordinates. Checks the degree, the coefficients and the shape.
struct BiasPlanes {
  int64_t m = 0;  ///< degree + 1
  std::vector<double> planes, z;
};

BiasPlanes bias_planes(const std::array<int64_t, 3>& shape, int64_t degree,
                       const std::vector<double>& coeff) {
  if (degree < 1 || degree > kMaxBiasFieldDegree ||
      static_cast<int64_t>(coeff.size()) != bias_field_terms(degree)) {
    throw std::invalid_argument(
        "RandBiasField: " + std::to_string(coeff.size()) + " coefficients for degree " +
        std::to_string(degree) + ": must be " +
        std::to_string(bias_field_terms(std::clamp<int64_t>(degree, 1, kMaxBiasFieldDegree))));
  }
  for (const int64_t n : shape) {
    if (n < 1)
      throw std::invalid_argument("RandBiasField: an empty image (" + shape_text(shape, true) +
                                  ")");
  }
  const int64_t m = degree + 1;
  // MONAI's coefficient matrix: term t at [i][j][k], i + j + k <= degree, in its order.
  std::vector<double> c(static_cast<size_t>(m * m * m), 0.0);
  size_t t = 0;
  for (int64_t i = 0; i <= degree; ++i)
    for (int64_t j = 0; j <= degree - i; ++j)
      for (int64_t k = 0; k <= degree - i - j; ++k)
        c[static_cast<size_t>((i * m + j) * m + k)] = coeff[t++];
  const std::vector<double> x = legendre_coordinates(shape[0]), y = legendre_coordinates(shape[1]);
  // Along x, r1[j][k][a]; then along y.
  std::vector<double> r1(static_cast<size_t>(m * m * shape[0]));
  for (int64_t j = 0; j < m; ++j)
    for (int64_t k = 0; k < m; ++k)
      for (int64_t a = 0; a < shape[0]; ++a)
        r1[static_cast<size_t>((j * m + k) * shape[0] + a)] =
            legval(&c[static_cast<size_t>(j * m + k)], m * m, m, x[static_cast<size_t>(a)]);
  BiasPlanes p;
  p.m = m;
  p.z = legendre_coordinates(shape[2]);
  p.planes.resize(static_cast<size_t>(m * shape[0] * shape[1]));
  for (int64_t k = 0; k < m; ++k)
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        p.planes[static_cast<size_t>((k * shape[0] + a) * shape[1] + b)] = legval(
            &r1[static_cast<size_t>(k * shape[0] + a)], m * shape[0], m, y[static_cast<size_t>(b)]);
  return p;
}

}  // namespace

at::Tensor bias_field(const std::array<int64_t, 3>& shape, int64_t degree,
                      const std::vector<double>& coeff, c10::Device device) {
  const BiasPlanes p = bias_planes(shape, degree, coeff);
  const int64_t m = p.m;
  // The last pass along z over every voxel, as tensor ops on the device, in
  // numpy's operations. Each division is by a tensor on the device, not a
  // host scalar: CUDA multiplies by a host scalar's reciprocal, which can
  // round differently from numpy's division.
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device);
  const auto host = [](const std::vector<double>& v, at::IntArrayRef sizes) {
    return at::from_blob(const_cast<double*>(v.data()), sizes, at::kDouble);
  };
  const at::Tensor r2 = host(p.planes, {m, shape[0], shape[1], 1}).to(device, false, true);
  const at::Tensor zt = host(p.z, {shape[2]}).to(device, false, true);
  at::Tensor c0 = r2[m - 2], c1 = r2[m - 1];
  for (int64_t i = 3, nd = m; i <= m; ++i) {
    const at::Tensor tmp = c0;
    nd -= 1;
    const at::Tensor divisor = at::scalar_tensor(static_cast<double>(nd), options);
    c0 = r2[m - i] - (c1 * static_cast<double>(nd - 1)) / divisor;
    c1 = tmp + (c1 * zt * static_cast<double>(2 * nd - 1)) / divisor;
  }
  return (c0 + c1 * zt).expand({shape[0], shape[1], shape[2]}).contiguous();
}

at::Tensor apply_bias_field(const at::Tensor& image, int64_t degree,
                            const std::vector<double>& coeff, Gather how) {
  if (image.dim() != 4)
    throw std::invalid_argument("RandBiasField: the image must be C x X x Y x Z, not " +
                                std::to_string(image.dim()) + " dims");
  const std::array<int64_t, 3> shape{image.size(1), image.size(2), image.size(3)};
  if (how == Gather::kTensorOps || !image.is_cpu()) {
    const at::Tensor field = bias_field(shape, degree, coeff, image.device());
    return (image.to(at::kDouble) * field.exp()).to(at::kFloat);
  }
  // On the host, a plane at a time: each voxel's field by the same recursion
  // along z as the tensor ops, ATen's exp of the plane (the tensor ops' exp:
  // the same bits), then every channel's product; no float64 volume.
  const BiasPlanes p = bias_planes(shape, degree, coeff);
  const at::Tensor in = image.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t channels = image.size(0), columns = shape[0] * shape[1], ny = shape[1],
                nz = shape[2], plane = columns * nz, m = p.m;
  at::Tensor factor = at::empty({ny * nz}, at::kDouble);
  double* e = factor.data_ptr<double>();
  // legval along z for a whole row at once: each step of the recursion over
  // the row, the same operations per voxel as legval (and divide: a power of
  // two as the product with its reciprocal), without its per-voxel loop.
  std::vector<double> c0v(static_cast<size_t>(nz)), c1v(static_cast<size_t>(nz));
  double* c0 = c0v.data();
  double* c1 = c1v.data();
  const double* z = p.z.data();
  for (int64_t a = 0; a < shape[0]; ++a) {
    for (int64_t b = 0; b < ny; ++b) {
      const auto h = [&](int64_t k) {
        return p.planes[static_cast<size_t>(k * columns + a * ny + b)];
      };
      std::fill(c0, c0 + nz, h(m - 2));
      std::fill(c1, c1 + nz, h(m - 1));
      for (int64_t i = 3, nd = m; i <= m; ++i) {
        nd -= 1;
        const double hk = h(m - i), below = static_cast<double>(nd - 1),
                     twice = static_cast<double>(2 * nd - 1);
        for (int64_t c = 0; c < nz; ++c) {
          const double tmp = c0[c];
          c0[c] = hk - divide(c1[c] * below, nd);
          c1[c] = tmp + divide(c1[c] * z[c] * twice, nd);
        }
      }
      double* row = e + b * nz;
      for (int64_t c = 0; c < nz; ++c) row[c] = c0[c] + c1[c] * z[c];
    }
    factor.exp_();
    const int64_t first = a * ny * nz;
    for (int64_t ch = 0; ch < channels; ++ch)
      for (int64_t v = 0; v < ny * nz; ++v)
        dst[ch * plane + first + v] =
            static_cast<float>(static_cast<double>(src[ch * plane + first + v]) * e[v]);
  }
  return out;
}

}  // namespace volshard
