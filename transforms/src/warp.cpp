// RandAffine and RandZoom, sampled around the crop: the draws, MONAI's
// matrix, and one grid_sample of the source voxels the crop needs.

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checks.h"
#include "volshard/core/error.h"
#include "volshard/transforms/intensity.h"
#include "volshard/transforms/spatial.h"
#include "volshard/transforms/view.h"
#include "simd.h"

namespace volshard {

using detail::spatial_shape;
using detail::HostLoop;
using detail::WarpRow;

namespace {

Matrix4 identity4() { return {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}; }

Matrix4 product(const Matrix4& a, const Matrix4& b) {
  Matrix4 c{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) c[4 * i + j] += a[4 * i + k] * b[4 * k + j];
  return c;
}

void check_range(const char* what, const double* v, size_t n, double hi, bool open_hi) {
  for (size_t i = 0; i < n; ++i) {
    if (!(v[i] >= 0) || (open_hi ? !(v[i] < hi) : !(v[i] <= hi))) {
      throw std::invalid_argument(std::string("RandAffine: ") + what + "=" + value_text(v[i]) +
                                  " must be in [0, " + value_text(hi) + (open_hi ? ")" : "]"));
    }
  }
}

double uniform(double lo, double hi, StreamRng& rng) {
  return lo + (hi - lo) * rng.uniform_double();
}

}  // namespace

void AffineOptions::validate() const {
  detail::check_probability("RandAffine: prob", prob);
  detail::check_probability("RandZoom: prob", zoom_prob);
  check_range("rotate", rotate.data(), 3, kMaxAffineRotate, false);
  check_range("shear", shear.data(), 6, kMaxAffineShear, false);
  check_range("translate", translate.data(), 3, kMaxAffineTranslate, false);
  check_range("scale", scale.data(), 3, kAffineScaleBound, true);
  detail::check_probability("Rand3DElastic: prob", elastic_prob);
  if (prob > 0 && elastic_prob > 0) {
    throw std::invalid_argument("RandAffine: prob=" + value_text(prob) +
                                " and Rand3DElastic: prob=" + value_text(elastic_prob) +
                                " are one step (Rand3DElastic holds the affine): set one of them");
  }
  if (!(elastic_sigma[0] > 0 && elastic_sigma[0] <= elastic_sigma[1] &&
        elastic_sigma[1] <= kMaxElasticSigma)) {
    throw std::invalid_argument(
        "Rand3DElastic: sigma=" + value_text(elastic_sigma[0]) + "," +
        value_text(elastic_sigma[1]) +
        " must be lo,hi with 0 < lo <= hi <= " + value_text(kMaxElasticSigma));
  }
  if (!(elastic_magnitude[0] >= 0 && elastic_magnitude[0] <= elastic_magnitude[1] &&
        elastic_magnitude[1] <= kMaxElasticMagnitude)) {
    throw std::invalid_argument(
        "Rand3DElastic: magnitude=" + value_text(elastic_magnitude[0]) + "," +
        value_text(elastic_magnitude[1]) +
        " must be lo,hi with 0 <= lo <= hi <= " + value_text(kMaxElasticMagnitude));
  }
  if (!(zoom[0] > 0 && zoom[0] <= zoom[1] && zoom[1] <= kMaxZoom)) {
    throw std::invalid_argument("RandZoom: zoom=" + value_text(zoom[0]) + "," +
                                value_text(zoom[1]) +
                                " must be lo,hi with 0 < lo <= hi <= " + value_text(kMaxZoom));
  }
}

AffineParams sample_affine(const AffineOptions& o, StreamRng& rng) {
  AffineParams p;
  // One coin: RandAffine's, or Rand3DElastic's, whose affine it also decides.
  p.apply = rng.uniform_double() < (o.elastic_prob > 0 ? o.elastic_prob : o.prob);
  // MONAI's RandAffineGrid order; drawn whether applied or not.
  std::array<double, 3> rotate, translate, scale;
  std::array<double, 6> shear;
  for (size_t d = 0; d < 3; ++d) rotate[d] = uniform(-o.rotate[d], o.rotate[d], rng);
  for (size_t d = 0; d < 6; ++d) shear[d] = uniform(-o.shear[d], o.shear[d], rng);
  for (size_t d = 0; d < 3; ++d) translate[d] = uniform(-o.translate[d], o.translate[d], rng);
  for (size_t d = 0; d < 3; ++d) scale[d] = 1.0 + uniform(-o.scale[d], o.scale[d], rng);
  if (p.apply) {
    p.rotate = rotate;
    p.shear = shear;
    p.translate = translate;
    p.scale = scale;
  }
  p.zoom_apply = rng.uniform_double() < o.zoom_prob;
  const double zoom = uniform(o.zoom[0], o.zoom[1], rng);
  if (p.zoom_apply) p.zoom = zoom;
  if (o.elastic_prob > 0) {  // after RandAffine's draws: its stream stays as it was
    const double magnitude = uniform(o.elastic_magnitude[0], o.elastic_magnitude[1], rng);
    const double sigma = uniform(o.elastic_sigma[0], o.elastic_sigma[1], rng);
    const uint64_t key = rng.next_u64();
    if (p.apply) {
      p.elastic = true;
      p.magnitude = magnitude;
      p.sigma = sigma;
      p.field_key = key;
    }
  }
  return p;
}

at::Tensor elastic_offsets(const at::Tensor& field, double sigma, double magnitude) {
  if (field.dim() != 4 || field.size(0) != 3)
    throw std::invalid_argument("Rand3DElastic: the offset field must be 3 x X x Y x Z, not " +
                                std::to_string(field.dim()) + " dims");
  // MONAI: gaussian(offset)[0] * magnitude, float32 times a Python float.
  return gaussian_smooth(field, {sigma, sigma, sigma}, /*truncated=*/3.0)
      .mul_(static_cast<float>(magnitude));
}

Matrix4 affine_matrix(const AffineParams& p) {
  Matrix4 m = identity4();
  if (p.zoom_apply) {
    for (int d = 0; d < 3; ++d) m[5 * d] = 1.0 / p.zoom;
  }
  if (!p.apply) return m;
  // MONAI's create_rotate(3, (x, y, z)): about x, then y, then z.
  const double cx = std::cos(p.rotate[0]), sx = std::sin(p.rotate[0]);
  const double cy = std::cos(p.rotate[1]), sy = std::sin(p.rotate[1]);
  const double cz = std::cos(p.rotate[2]), sz = std::sin(p.rotate[2]);
  const Matrix4 rx{1, 0, 0, 0, 0, cx, -sx, 0, 0, sx, cx, 0, 0, 0, 0, 1};
  const Matrix4 ry{cy, 0, sy, 0, 0, 1, 0, 0, -sy, 0, cy, 0, 0, 0, 0, 1};
  const Matrix4 rz{cz, -sz, 0, 0, sz, cz, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  const auto& h = p.shear;  // MONAI's create_shear(3, coefs)
  const Matrix4 shear{1, h[0], h[1], 0, h[2], 1, h[3], 0, h[4], h[5], 1, 0, 0, 0, 0, 1};
  const auto& t = p.translate;
  const Matrix4 translate{1, 0, 0, t[0], 0, 1, 0, t[1], 0, 0, 1, t[2], 0, 0, 0, 1};
  const auto& s = p.scale;
  const Matrix4 scale{s[0], 0, 0, 0, 0, s[1], 0, 0, 0, 0, s[2], 0, 0, 0, 0, 1};
  const Matrix4 grid =
      product(product(product(product(product(rx, ry), rz), shear), translate), scale);
  return product(m, grid);
}

namespace {

// grid_sample's coordinate for one axis of length n (align_corners=false):
// border clamps to [0, n - 1]; reflection reflects about -0.5 and n - 0.5
// (torch's reflect_coordinates), then clamps.
inline double pad_coordinate(double x, int64_t n, PaddingMode padding) {
  const double last = static_cast<double>(n - 1);
  if (padding == PaddingMode::kZeros || (x >= 0.0 && x <= last)) return x;
  if (padding == PaddingMode::kReflection) {
    const double span = static_cast<double>(n);
    const double in = std::fabs(x + 0.5);
    const double extra = std::fmod(in, span);
    const auto flips = static_cast<int64_t>(std::floor(in / span));
    x = flips % 2 == 0 ? extra - 0.5 : span - extra - 0.5;
  }
  return std::min(std::max(x, 0.0), last);
}

// The host kernel: each output voxel's source position from the affine map,
// trilinear (image) or nearest (label, round half to even as grid_sample) on
// the source's own strides, no grid tensor. T is the source's dtype, float
// (image, float labels) or uint8 (compact labels); the output is contiguous.
// floor(x) as an integer, without libm's call (no SSE4.1 rounding here).
inline int64_t floor_int(double x) {
  const auto i = static_cast<int64_t>(x);
  return x < static_cast<double>(i) ? i - 1 : i;
}

// nearbyint(x): to nearest, ties to even, as grid_sample's nearest mode.
inline int64_t round_half_even(double x) {
  const int64_t f = floor_int(x);
  const double rest = x - static_cast<double>(f);
  if (rest > 0.5 || (rest == 0.5 && (f & 1) != 0)) return f + 1;
  return f;
}

// The host kernel: each output voxel's source position from the affine map,
// computed once for the image (trilinear) and the label (nearest, ties to
// even as grid_sample), on the sources' own strides, no grid tensor. L is the
// label's dtype (uint8 compact labels, or float); outputs are contiguous.
// Rows go through the AVX2 loop where `simd` (the same bits), which leaves
// the voxels near the volume's edges to the plain loop.
template <class L>
void warp_host(Sample& sample, const double (&B)[3][3], const double (&b)[3],
               const std::array<int64_t, 3>& size, PaddingMode padding, const float* offsets,
               bool simd) {
  const at::Tensor& image = sample.image;
  const bool with_label = sample.label.defined();
  const int64_t n[3] = {image.size(1), image.size(2), image.size(3)};
  const int64_t sc = image.stride(0), s0 = image.stride(1), s1 = image.stride(2),
                s2 = image.stride(3);
  at::Tensor image_out = at::empty({image.size(0), size[0], size[1], size[2]}, image.options());
  at::Tensor label_out;
  const L* label_in = nullptr;
  int64_t l[3] = {}, label_channels = 0, lc = 0;
  if (with_label) {
    label_channels = sample.label.size(0);
    lc = sample.label.stride(0);
    for (int a = 0; a < 3; ++a) l[a] = sample.label.stride(a + 1);
    label_out = at::empty({label_channels, size[0], size[1], size[2]}, sample.label.options());
    label_in = sample.label.data_ptr<L>();
  }
  const int64_t plane = size[0] * size[1] * size[2];
  const float* in = image.data_ptr<float>();
  float* out = image_out.data_ptr<float>();
  L* label_o = with_label ? label_out.data_ptr<L>() : nullptr;
  const int64_t channels = image.size(0);
  const auto inside = [&](int64_t i, int a) { return i >= 0 && i < n[a]; };
  // Every channel's value at output voxel `voxel` from the eight neighbours of
  // lo, all inside the source, upper weights w.
  const auto trilinear = [&](const int64_t(&lo)[3], const double(&w)[3], int64_t voxel) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* q = in + c * sc + lo[0] * s0 + lo[1] * s1 + lo[2] * s2;
      const auto v = [q](int64_t offset) { return static_cast<double>(q[offset]); };
      const double c00 = v(0) + (v(s2) - v(0)) * w[2];
      const double c01 = v(s1) + (v(s1 + s2) - v(s1)) * w[2];
      const double c10 = v(s0) + (v(s0 + s2) - v(s0)) * w[2];
      const double c11 = v(s0 + s1) + (v(s0 + s1 + s2) - v(s0 + s1)) * w[2];
      const double c0 = c00 + (c01 - c00) * w[1];
      const double c1 = c10 + (c11 - c10) * w[1];
      out[c * plane + voxel] = static_cast<float>(c0 + (c1 - c0) * w[0]);
    }
  };
  // Output voxel `at`, the row's i2-th, whose row starts at position `row`.
  const auto one_voxel = [&](const double(&row)[3], int64_t i2, int64_t at) {
    double p[3];
    for (int a = 0; a < 3; ++a) p[a] = row[a] + B[a][2] * static_cast<double>(i2);
    if (offsets) {  // Rand3DElastic: j + offsets(j) goes through the map
      const double d[3] = {offsets[at], offsets[plane + at], offsets[2 * plane + at]};
      for (int a = 0; a < 3; ++a) p[a] += B[a][0] * d[0] + B[a][1] * d[1] + B[a][2] * d[2];
    }
    for (int a = 0; a < 3; ++a) p[a] = pad_coordinate(p[a], n[a], padding);
    if (with_label) {
      int64_t k[3];
      bool in_volume = true;
      for (int a = 0; a < 3; ++a) {
        k[a] = round_half_even(p[a]);
        in_volume = in_volume && inside(k[a], a);
      }
      const int64_t offset = k[0] * l[0] + k[1] * l[1] + k[2] * l[2];
      for (int64_t c = 0; c < label_channels; ++c)
        label_o[c * plane + at] = in_volume ? label_in[c * lc + offset] : L(0);
    }
    int64_t lo[3];
    double w[3];  // the upper neighbour's weight
    for (int a = 0; a < 3; ++a) {
      lo[a] = floor_int(p[a]);
      w[a] = p[a] - static_cast<double>(lo[a]);
    }
    if (lo[0] >= 0 && lo[0] + 1 < n[0] && lo[1] >= 0 && lo[1] + 1 < n[1] && lo[2] >= 0 &&
        lo[2] + 1 < n[2]) {  // all eight neighbours inside: no checks
      trilinear(lo, w, at);
      return;
    }
    for (int64_t c = 0; c < channels; ++c) {  // at the edge: the neighbours inside (zeros)
      const float* channel = in + c * sc;
      double value = 0.0;
      for (int corner = 0; corner < 8; ++corner) {
        int64_t k[3];
        double weight = 1.0;
        bool in_volume = true;
        for (int a = 0; a < 3; ++a) {
          const bool up = (corner >> (2 - a)) & 1;
          k[a] = lo[a] + (up ? 1 : 0);
          weight *= up ? w[a] : 1.0 - w[a];
          in_volume = in_volume && inside(k[a], a);
        }
        if (in_volume && weight != 0.0)
          value += weight * static_cast<double>(channel[k[0] * s0 + k[1] * s1 + k[2] * s2]);
      }
      out[c * plane + at] = static_cast<float>(value);
    }
  };
  WarpRow<L> r;  // what the AVX2 loop reads: its offsets are int32
  if (simd) {
    const auto fits = [](const int64_t (&stride)[3], const int64_t (&extent)[3]) {
      int64_t most = 0;
      for (int a = 0; a < 3; ++a) most += stride[a] * std::max<int64_t>(extent[a] - 1, 0);
      return most < (int64_t{1} << 31);
    };
    const int64_t s[3] = {s0, s1, s2};
    simd = fits(s, n) && (!with_label || fits(l, n));
    r.image = in;
    r.image_channels = channels;
    r.image_channel_stride = sc;
    for (int a = 0; a < 3; ++a) {
      r.stride[a] = static_cast<int32_t>(s[a]);
      r.label_stride[a] = static_cast<int32_t>(l[a]);
      r.last[a] = static_cast<double>(n[a] - 1);
      for (int e = 0; e < 3; ++e) r.B[a][e] = B[a][e];
    }
    r.label = label_in;
    r.label_channels = label_channels;
    r.label_channel_stride = lc;
    r.image_out = out;
    r.label_out = label_o;
    r.plane = plane;
    r.offsets = offsets;
  }
  std::vector<int64_t> rest(simd ? static_cast<size_t>(size[2]) : 0);
  // Rows in bands of 8 along i1, each band through every i0: where the
  // view's rows run along a strided source axis (a transposed layout), one
  // band's cache lines serve the next plane's rows, as a whole plane's do not.
  constexpr int64_t kBand = 8;
  for (int64_t band = 0; band < size[1]; band += kBand) {
    for (int64_t i0 = 0; i0 < size[0]; ++i0) {
      for (int64_t i1 = band; i1 < std::min(band + kBand, size[1]); ++i1) {
        const int64_t at = (i0 * size[1] + i1) * size[2];  // the row's first output voxel
        double row[3];  // the position of (i0, i1, 0); each i2 adds B[.][2]
        for (int a = 0; a < 3; ++a)
          row[a] = B[a][0] * static_cast<double>(i0) + B[a][1] * static_cast<double>(i1) + b[a];
#if defined(VOLSHARD_AVX2)
        if (simd) {
          const int64_t listed = detail::warp_row_avx2(r, row, at, size[2], rest.data());
          for (int64_t k = 0; k < listed; ++k) one_voxel(row, rest[k], at + rest[k]);
          continue;
        }
#endif
        for (int64_t i2 = 0; i2 < size[2]; ++i2) one_voxel(row, i2, at + i2);
      }
    }
  }
  sample.image = image_out;
  if (with_label) sample.label = label_out;
}

}  // namespace

Sample warp_view(Sample sample, const Matrix4& m, PaddingMode padding, Gather how,
                 const at::Tensor& offsets) {
  return detail::warp_view(std::move(sample), m, padding, how, offsets, detail::HostLoop::kAuto);
}

Sample detail::warp_view(Sample sample, const Matrix4& m, PaddingMode padding, Gather how,
                         const at::Tensor& offsets, HostLoop loop) {
  const SpatialMap view = view_of(sample);
  const std::array<int64_t, 3> source = spatial_shape(sample.image);
  if (sample.label.defined() && spatial_shape(sample.label) != source) {
    throw std::invalid_argument("RandAffine: image " + shape_text(source, true) + " and label " +
                                shape_text(spatial_shape(sample.label), true) +
                                " differ in spatial shape");
  }
  const std::array<int64_t, 3>& size = view.size;
  const bool elastic = offsets.defined();
  if (elastic && (offsets.dim() != 4 || offsets.size(0) != 3 || spatial_shape(offsets) != size)) {
    throw std::invalid_argument("Rand3DElastic: offsets of shape " +
                                shape_text(offsets.sizes().vec(), true) + " for a view of " +
                                shape_text(size, true) + ": must be 3 x the view's shape");
  }
  // Output voxel j -> view coordinate q = M (j - c) + t + c -> source
  // coordinate: along source axis axis[d], origin + sign[d] * q_d. As one
  // affine map: p_a = sum_e B[a][e] j_e + b[a].
  double B[3][3] = {}, b[3] = {};
  for (int d = 0; d < 3; ++d) {
    const int64_t a = view.axis[d];
    const double sign = static_cast<double>(view.sign[d]);
    double offset = m[4 * d + 3] + 0.5 * static_cast<double>(size[d] - 1);
    for (int e = 0; e < 3; ++e) {
      B[a][e] = sign * m[4 * d + e];
      offset -= m[4 * d + e] * 0.5 * static_cast<double>(size[e] - 1);
    }
    b[a] = static_cast<double>(view.origin[a]) + sign * offset;
  }
  const bool label_on_host = !sample.label.defined() ||
                             (sample.label.is_cpu() && (sample.label.scalar_type() == at::kByte ||
                                                        sample.label.scalar_type() == at::kFloat));
  if (how == Gather::kAuto && sample.image.is_cpu() && sample.image.scalar_type() == at::kFloat &&
      label_on_host && (!elastic || offsets.is_cpu())) {
    const at::Tensor host_offsets = elastic ? offsets.to(at::kFloat).contiguous() : at::Tensor();
    const float* d = elastic ? host_offsets.data_ptr<float>() : nullptr;
    const bool simd = loop == HostLoop::kAuto && avx2_available();
    if (sample.label.defined() && sample.label.scalar_type() == at::kFloat)
      warp_host<float>(sample, B, b, size, padding, d, simd);
    else
      warp_host<uint8_t>(sample, B, b, size, padding, d, simd);
    sample.view.reset();
    sample.indices.reset();
    return sample;
  }
  // Elsewhere (a GPU, other dtypes, or kTensorOps): grid_sampler's own
  // arithmetic on a float32 grid. The box of source voxels the output reads: the corners' extent
  // (an affine map), one more for the interpolation's upper neighbour, clamped to the volume;
  // reflection past an edge may read anywhere on that axis.
  std::array<int64_t, 3> lo{}, hi{};
  // Rand3DElastic moves each voxel by at most its offsets' largest |value| per axis.
  // (On the meta device, which holds no values, the whole volume.)
  std::array<double, 3> reach{};
  if (elastic && offsets.is_meta()) {
    reach.fill(1e12);
  } else if (elastic) {
    const at::Tensor most = offsets.abs().amax({1, 2, 3}).to(at::kCPU, at::kDouble);
    for (int e = 0; e < 3; ++e) reach[e] = most[e].item<double>();
  }
  for (int a = 0; a < 3; ++a) {
    double mn = b[a], mx = b[a];
    for (int e = 0; e < 3; ++e) {
      mn -= std::fabs(B[a][e]) * reach[e];
      mx += std::fabs(B[a][e]) * reach[e];
    }
    for (int e = 0; e < 3; ++e) {
      const double far = B[a][e] * static_cast<double>(size[e] - 1);
      mn += std::min(0.0, far);
      mx += std::max(0.0, far);
    }
    const int64_t last = source[a] - 1;
    if (padding == PaddingMode::kReflection && (mn < 0 || mx > static_cast<double>(last))) {
      lo[a] = 0;
      hi[a] = last;
    } else {
      lo[a] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::max(mn, -1.0))), 0, last);
      hi[a] = std::clamp<int64_t>(
          static_cast<int64_t>(std::floor(std::min(mx, static_cast<double>(source[a])))) + 1, 0,
          last);
      hi[a] = std::max(hi[a], lo[a]);
    }
  }
  const auto options = at::TensorOptions().dtype(at::kDouble).device(sample.image.device());
  const at::Tensor j0 = at::arange(size[0], options).view({size[0], 1, 1});
  const at::Tensor j1 = at::arange(size[1], options).view({1, size[1], 1});
  const at::Tensor j2 = at::arange(size[2], options).view({1, 1, size[2]});
  // grid_sample's last dimension is (W, H, D): source axes 2, 1, 0, each
  // normalised over the box as align_corners=false does: (2 p + 1) / n - 1.
  std::vector<at::Tensor> components;
  for (int a = 2; a >= 0; --a) {
    const double n = static_cast<double>(hi[a] - lo[a] + 1);
    const double k = 2.0 / n;
    const double c = (2.0 * (b[a] - static_cast<double>(lo[a])) + 1.0) / n - 1.0;
    at::Tensor component = (j0 * (k * B[a][0]) + j1 * (k * B[a][1]) + j2 * (k * B[a][2]) + c)
                               .expand({size[0], size[1], size[2]});
    if (elastic) {
      const at::Tensor d = offsets.to(options);
      component = component + d[0] * (k * B[a][0]) + d[1] * (k * B[a][1]) + d[2] * (k * B[a][2]);
    }
    components.push_back(component);
  }
  const at::Tensor grid = at::stack(components, -1).to(at::kFloat).unsqueeze(0);
  const int64_t pad = padding == PaddingMode::kZeros ? 0 : padding == PaddingMode::kBorder ? 1 : 2;
  const auto box = [&](const at::Tensor& t) {
    return t.slice(1, lo[0], hi[0] + 1).slice(2, lo[1], hi[1] + 1).slice(3, lo[2], hi[2] + 1);
  };
  const at::Tensor image = box(sample.image).to(at::kFloat).unsqueeze(0);
  sample.image = at::grid_sampler(image, grid, /*bilinear*/ 0, pad, false).squeeze(0);
  if (sample.label.defined()) {
    const at::Tensor label = box(sample.label).to(at::kFloat).unsqueeze(0);
    sample.label = at::grid_sampler(label, grid, /*nearest*/ 1, pad, false)
                       .squeeze(0)
                       .to(sample.label.scalar_type());
  }
  sample.view.reset();
  sample.indices.reset();
  return sample;
}

}  // namespace volshard
