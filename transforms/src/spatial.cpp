// Spatial transforms: RandRotate90, RandFlip.

#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checks.h"

namespace volshard {

using detail::check_probability;
using detail::check_spatial_axis;
using detail::spatial_shape;

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

SpatialImage orient(const SpatialImage& image, const std::string& codes) {
  const std::array<int64_t, 3> shape = spatial_shape(image.data);
  const Ornt start = io_orientation(image.affine);
  const Ornt end = ornt_of_codes(codes, "Orientation: axcodes='" + codes + "'");
  for (size_t i = 0; i < 3; ++i)
    if (start[i][0] < 0)
      throw std::invalid_argument("Orientation: voxel axis " + std::to_string(i) +
                                  " of the affine points nowhere (singular affine)");
  // nibabel's ornt_transform: voxel axis i goes to axis t[i][0], flipped if -1.
  Ornt t{};
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j)
      if (end[j][0] == start[i][0]) t[i] = {static_cast<int>(j), start[i][1] == end[j][1] ? 1 : -1};
  std::vector<int64_t> flips, order(4, 0);
  for (size_t i = 0; i < 3; ++i) {
    if (t[i][1] < 0) flips.push_back(static_cast<int64_t>(i) + 1);
    order[static_cast<size_t>(t[i][0]) + 1] = static_cast<int64_t>(i) + 1;  // argsort of t[:, 0]
  }
  SpatialImage out;
  out.data = flips.empty() ? image.data : image.data.flip(flips);
  out.data = out.data.permute(order).contiguous();
  // nibabel's inv_ornt_aff: output voxel -> input voxel, then the old affine.
  Affine xform{};
  for (size_t i = 0; i < 3; ++i) {
    const double centre = -(static_cast<double>(shape[i]) - 1) / 2.0;
    xform[i][static_cast<size_t>(t[i][0])] = t[i][1];
    xform[i][3] = t[i][1] * centre - centre;
  }
  xform[3][3] = 1;
  out.affine = multiply(image.affine, xform);
  return out;
}

}  // namespace volshard
