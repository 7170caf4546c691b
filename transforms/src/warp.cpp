// RandAffine and RandZoom, sampled around the crop: the draws, MONAI's
// matrix, and one grid_sample of the source voxels the crop needs.

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "checks.h"
#include "volshard/core/error.h"
#include "volshard/transforms/spatial.h"
#include "volshard/transforms/view.h"

namespace volshard {

using detail::spatial_shape;

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
  if (!(prob >= 0 && prob <= 1) || !(zoom_prob >= 0 && zoom_prob <= 1)) {
    throw std::invalid_argument("RandAffine: prob=" + value_text(prob) +
                                ", zoom_prob=" + value_text(zoom_prob) + " must be in [0, 1]");
  }
  check_range("rotate", rotate.data(), 3, 3.141592653589793, false);
  check_range("shear", shear.data(), 6, 4.0, false);
  check_range("translate", translate.data(), 3, 4096.0, false);
  check_range("scale", scale.data(), 3, 1.0, true);
  if (!(zoom[0] > 0 && zoom[0] <= zoom[1] && zoom[1] <= 10)) {
    throw std::invalid_argument("RandZoom: zoom=" + value_text(zoom[0]) + "," +
                                value_text(zoom[1]) + " must be lo,hi with 0 < lo <= hi <= 10");
  }
}

AffineParams sample_affine(const AffineOptions& o, StreamRng& rng) {
  AffineParams p;
  p.apply = rng.uniform_double() < o.prob;
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
  return p;
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
  const Matrix4 grid = product(product(product(product(product(rx, ry), rz), shear), translate),
                               scale);
  return product(m, grid);
}

Sample warp_view(Sample sample, const Matrix4& m, PaddingMode padding) {
  const SpatialMap view = view_of(sample);
  const std::array<int64_t, 3> source = spatial_shape(sample.image);
  const std::array<int64_t, 3>& size = view.size;
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
  // The box of source voxels the output reads: the corners' extent (an
  // affine map), one more for the interpolation's upper neighbour, clamped
  // to the volume; reflection past an edge may read anywhere on that axis.
  std::array<int64_t, 3> lo{}, hi{};
  for (int a = 0; a < 3; ++a) {
    double mn = b[a], mx = b[a];
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
    components.push_back((j0 * (k * B[a][0]) + j1 * (k * B[a][1]) + j2 * (k * B[a][2]) + c)
                             .expand({size[0], size[1], size[2]}));
  }
  const at::Tensor grid = at::stack(components, -1).to(at::kFloat).unsqueeze(0);
  const int64_t pad = padding == PaddingMode::kZeros    ? 0
                      : padding == PaddingMode::kBorder ? 1
                                                        : 2;
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
