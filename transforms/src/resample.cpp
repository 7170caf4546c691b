// Spacing: MONAI 1.4's Spacing and SpatialResample (torch backend), step by step.
//
// What MONAI runs for Spacing(pixdim, mode="bilinear"|"nearest") with its
// defaults (diagonal=False, padding_mode="border", align_corners=False,
// dtype=float64, scale_extent=False) and monai.config.USE_COMPILED false:
//
//   Spacing.__call__ (transforms/spatial/array.py): out_d = pixdim, except that
//     an axis whose own spacing (affine_to_spacing: the column norms) is within
//     AFFINE_TOL = 1e-3 of it keeps its own; new_affine = zoom_affine(affine,
//     out_d, diagonal=False) (data/utils.py): the rotation of the affine's QR
//     split with the zooms replaced; shape, offset = compute_shape_offset(shape,
//     affine, new_affine): the input's corner voxel centres in the new voxels,
//     shape = round(extent + 1), origin at the corner that is smallest along
//     every new axis.
//   spatial_resample (transforms/spatial/functional.py): xform =
//     np.linalg.solve(src, dst); nothing is resampled when src ~ dst or xform ~ I
//     (allclose, atol 1e-3) and the shape is unchanged. Else the image goes to
//     float64 and AffineTransform(normalized=False, reverse_indexing=True,
//     align_corners=False) (networks/layers/spatial_transforms.py) computes
//     theta = to_norm_affine(xform) = N(src) @ xform @ inv(N(dst)), N(d) mapping
//     voxel centres [-0.5, d - 0.5] onto [-1, 1]; reverses the axes (grid_sample's
//     x is the last one); grid = F.affine_grid(theta[:, :3], (1, C, *shape),
//     align_corners=False); out = F.grid_sample(img, grid, mode, "border",
//     align_corners=False), all float64, then float32.
//
// The same ATen ops run here on the same float64 values (torch's LAPACK where
// numpy calls LAPACK), so the output matches MONAI's to the last bit on the
// goldens.

#include "resample.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "checks.h"
#include "volshard/core/error.h"
#include "volshard/core/limits.h"

namespace volshard {

using detail::spatial_shape;

namespace {

constexpr double kAffineTol = 1e-3;       // MONAI's AFFINE_TOL
constexpr int64_t kSlabVoxels = 1 << 16;  // a slab's grid is ~1.5 MB of float64
// torch's bmm calls BLAS from 34 rows of the grid (rows * 4 * 3 >= 400) and its
// own loop below, which rounds differently: a slab must take the whole grid's path.
constexpr int64_t kMinSlabVoxels = 64;

std::string affine_text(const Affine& a) {
  std::string s = "[";
  for (size_t r = 0; r < 4; ++r) {
    s += r == 0 ? "[" : ", [";
    for (size_t c = 0; c < 4; ++c) s += (c == 0 ? "" : ", ") + value_text(a[r][c]);
    s += "]";
  }
  return s + "]";
}

// MONAI's to_affine_nd(3, affine) as a 4 x 4 float64 tensor: the bottom row
// is [0, 0, 0, 1] whatever the affine holds there.
at::Tensor affine_tensor(const Affine& a, const char* what) {
  at::Tensor t = at::eye(4, at::kDouble);
  auto m = t.accessor<double, 2>();
  for (size_t r = 0; r < 3; ++r) {
    for (size_t c = 0; c < 4; ++c) {
      if (!std::isfinite(a[r][c]))
        throw std::invalid_argument(std::string(what) + " " + affine_text(a) + " is not finite");
      m[static_cast<int64_t>(r)][static_cast<int64_t>(c)] = a[r][c];
    }
  }
  return t;
}

// The matrix laid out column-major, as numpy hands it to LAPACK. torch 1.13
// factors a row-major matrix through its transpose, which rounds differently
// from numpy's dgesv: theta moves by ~1e-16 and MONAI's nearest ties flip
// unless the layout matches (measured on the goldens).
at::Tensor column_major(const at::Tensor& a) {
  return a.transpose(-2, -1).contiguous().transpose(-2, -1);
}

// np.linalg.solve(a, b) (LAPACK getrf + getrs on a), or invalid_argument
// naming `named` when a is singular.
at::Tensor solve(const at::Tensor& a, const at::Tensor& b, const Affine& named, const char* what) {
  const auto [x, info] = at::linalg_solve_ex(column_major(a), b);
  if (info.item<int64_t>() != 0 || !at::isfinite(x).all().item<bool>())
    throw std::invalid_argument(std::string(what) + " " + affine_text(named) + " is singular");
  return x;
}

// MONAI's normalize_transform(shape, align_corners=False), 1 x 4 x 4: voxel
// coordinates [-0.5, d - 0.5] onto [-1, 1]. 2 / d and 1 / d - 1 are what
// torch's reciprocal-then-multiply gives (a factor 2 is exact).
at::Tensor normalize_transform(const std::array<int64_t, 3>& shape) {
  at::Tensor n = at::zeros({1, 4, 4}, at::kDouble);
  auto m = n.accessor<double, 3>();
  for (size_t i = 0; i < 3; ++i) {
    const auto d = static_cast<double>(shape[i]);
    const auto k = static_cast<int64_t>(i);
    m[0][k][k] = 2.0 / d;
    m[0][k][3] = 1.0 / d - 1.0;
  }
  m[0][3][3] = 1.0;
  return n;
}

// AffineTransform.forward's theta from the voxel-to-voxel xform: to_norm_affine,
// then the spatial axes reversed, 1 x 3 x 4.
at::Tensor theta_of(const at::Tensor& xform, const std::array<int64_t, 3>& in_shape,
                    const std::array<int64_t, 3>& out_shape) {
  // src_xform @ affine @ inv(dst_xform), batched 1 x 4 x 4 as in MONAI (bmm).
  at::Tensor theta = at::matmul(at::matmul(normalize_transform(in_shape), xform.unsqueeze(0)),
                                at::linalg_inv(column_major(normalize_transform(out_shape))));
  const at::Tensor reversed = at::tensor({2, 1, 0, 3}, at::kLong);
  theta = theta.index_select(1, reversed).index_select(2, reversed);
  return theta.narrow(1, 0, 3);
}

// ATen's linspace_from_neg_one (AffineGridGenerator.cpp) for align_corners=False.
at::Tensor linspace_from_neg_one(int64_t steps) {
  if (steps <= 1) return at::zeros({1}, at::kDouble);
  return at::linspace(-1, 1, steps, at::kDouble) * (steps - 1) / steps;
}

// One axis of a grid that maps axes to axes: for each output index, the
// source coordinate grid_sampler_3d computes (align_corners false, border
// padding) and its two corners' weights, in its own arithmetic.
struct AxisSamples {
  std::vector<int64_t> lo;         // floor of the coordinate (>= 0: border clips)
  std::vector<bool> hi_inside;     // lo + 1 within the input (the kernel skips it otherwise)
  std::vector<double> w_lo, w_hi;  // (lo + 1) - x and x - lo
  std::vector<int64_t> nearest;    // nearbyint(x)
};

AxisSamples axis_samples(const at::Tensor& lin, double scale, double shift, int64_t in_size) {
  const auto n = static_cast<size_t>(lin.numel());
  const double* l = lin.data_ptr<double>();
  AxisSamples a{std::vector<int64_t>(n), std::vector<bool>(n), std::vector<double>(n),
                std::vector<double>(n), std::vector<int64_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    // The base grid's row times theta: the other two products are exact
    // zeros, so BLAS's sum is this product plus the shift (compiled without
    // contraction into a fused multiply-add: -ffp-contract=off).
    const double g = l[i] * scale + shift;
    double x = ((g + 1) * static_cast<double>(in_size) - 1) / 2;       // grid_sampler_unnormalize
    x = std::min(static_cast<double>(in_size - 1), std::max(x, 0.0));  // clip_coordinates
    const auto lo = static_cast<int64_t>(std::floor(x));
    a.lo[i] = lo;
    a.hi_inside[i] = lo + 1 < in_size;
    a.w_lo[i] = static_cast<double>(lo + 1) - x;
    a.w_hi[i] = x - static_cast<double>(lo);
    a.nearest[i] = static_cast<int64_t>(std::nearbyint(x));
  }
  return a;
}

// grid_sampler_3d_cpu_impl's loop for a grid that maps axes to axes, on the
// planes [begin, end) of the output: the same corner weights (products in its
// order), the same sum (corners in its order, those outside skipped), in
// float64 from the input's values, rounded once to float32. Each output
// voxel reads its coordinates from the three axes' tables instead of a grid.
template <class In>
void sample_separable(const In* in, const std::array<int64_t, 4>& in_strides, int64_t channels,
                      const AxisSamples& z, const AxisSamples& y, const AxisSamples& x,
                      bool nearest, int64_t begin, int64_t end, float* out,
                      const std::array<int64_t, 3>& out_shape) {
  const int64_t sc = in_strides[0], sd = in_strides[1], sh = in_strides[2], sw = in_strides[3];
  const int64_t height = out_shape[1], width = out_shape[2];
  const int64_t out_channel = out_shape[0] * height * width;
  for (int64_t d = begin; d < end; ++d) {
    const auto zd = static_cast<size_t>(d);
    for (int64_t h = 0; h < height; ++h) {
      const auto yh = static_cast<size_t>(h);
      float* row = out + (d * height + h) * width;
      for (int64_t w = 0; w < width; ++w) {
        const auto xw = static_cast<size_t>(w);
        if (nearest) {
          const In* v = in + z.nearest[zd] * sd + y.nearest[yh] * sh + x.nearest[xw] * sw;
          for (int64_t c = 0; c < channels; ++c)
            row[c * out_channel + w] = static_cast<float>(static_cast<double>(v[c * sc]));
          continue;
        }
        const double xl = x.w_lo[xw], xh = x.w_hi[xw], yl = y.w_lo[yh], yh_ = y.w_hi[yh],
                     zl = z.w_lo[zd], zh = z.w_hi[zd];
        const double tnw = xl * yl * zl, tne = xh * yl * zl, tsw = xl * yh_ * zl,
                     tse = xh * yh_ * zl, bnw = xl * yl * zh, bne = xh * yl * zh,
                     bsw = xl * yh_ * zh, bse = xh * yh_ * zh;
        const bool x1 = x.hi_inside[xw], y1 = y.hi_inside[yh], z1 = z.hi_inside[zd];
        const In* v = in + z.lo[zd] * sd + y.lo[yh] * sh + x.lo[xw] * sw;
        for (int64_t c = 0; c < channels; ++c, v += sc) {
          double acc = 0;
          acc += static_cast<double>(v[0]) * tnw;
          if (x1) acc += static_cast<double>(v[sw]) * tne;
          if (y1) acc += static_cast<double>(v[sh]) * tsw;
          if (x1 && y1) acc += static_cast<double>(v[sh + sw]) * tse;
          if (z1) acc += static_cast<double>(v[sd]) * bnw;
          if (z1 && x1) acc += static_cast<double>(v[sd + sw]) * bne;
          if (z1 && y1) acc += static_cast<double>(v[sd + sh]) * bsw;
          if (z1 && y1 && x1) acc += static_cast<double>(v[sd + sh + sw]) * bse;
          row[c * out_channel + w] = static_cast<float>(acc);
        }
      }
    }
  }
}

void check_grid_shape(const Grid& grid) {
  for (int64_t s : grid.shape) {
    if (s < 1)
      throw std::invalid_argument("resample: grid shape " + shape_text(grid.shape, true) +
                                  " must have at least one voxel along each axis");
  }
}

}  // namespace

Grid spacing_grid(const std::array<int64_t, 3>& shape, const Affine& affine,
                  const std::array<double, 3>& pixdim) {
  for (size_t a = 0; a < 3; ++a) {
    if (!(pixdim[a] > 0.0) || !std::isfinite(pixdim[a])) {
      throw std::invalid_argument("Spacing: pixdim[" + std::to_string(a) +
                                  "]=" + value_text(pixdim[a]) + " must be finite and > 0 (mm)");
    }
    if (shape[a] < 1) {
      throw std::invalid_argument("Spacing: shape " + shape_text(shape, true) +
                                  " must have at least one voxel along each axis");
    }
  }
  const at::Tensor in = affine_tensor(affine, "Spacing: the affine");
  const at::Tensor rzs = in.slice(0, 0, 3).slice(1, 0, 3);

  // Spacing.__call__: an axis within AFFINE_TOL of the target keeps its spacing.
  std::array<double, 3> out_d = pixdim;
  for (size_t c = 0; c < 3; ++c) {
    double own = 0.0;
    for (size_t r = 0; r < 3; ++r) own += affine[r][c] * affine[r][c];
    own = own == 0.0 ? 1.0 : std::sqrt(own);
    if (pixdim[c] - kAffineTol <= own && own <= pixdim[c] + kAffineTol) out_d[c] = own;
  }

  // zoom_affine(diagonal=False): rzs = rotation @ zs with zs = cholesky(rzs^T
  // rzs)^T upper triangular (positive diagonal), so the rotation keeps each
  // axis's direction and sign; the new zooms replace zs, dropping any shear.
  const auto [lower, info] = at::linalg_cholesky_ex(column_major(at::matmul(rzs.t(), rzs)));
  if (info.item<int64_t>() != 0)
    throw std::invalid_argument("Spacing: the affine " + affine_text(affine) + " is singular");
  const at::Tensor zs = lower.t();
  const at::Tensor rotation = at::matmul(rzs, at::linalg_inv(column_major(zs)));
  const at::Tensor zs_diagonal = zs.diagonal().contiguous();
  at::Tensor zooms = at::empty({3}, at::kDouble);
  for (int64_t c = 0; c < 3; ++c) {  // np.sign(diag(zs)) * abs(out_d)
    const double z = zs_diagonal.data_ptr<double>()[c];
    zooms.data_ptr<double>()[c] = (z > 0   ? 1.0
                                   : z < 0 ? -1.0
                                           : 0.0) *
                                  std::abs(out_d[static_cast<size_t>(c)]);
  }
  at::Tensor out = at::eye(4, at::kDouble);
  out.slice(0, 0, 3).slice(1, 0, 3).copy_(at::matmul(rotation, at::diag(zooms)));

  // compute_shape_offset(scale_extent=False): the 8 corner voxel centres of the
  // input (meshgrid "ij" order) in the new voxel coordinates.
  at::Tensor corners = at::ones({4, 8}, at::kDouble);
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t r = 0; r < 3; ++r) {
      const bool far = ((i >> (2 - r)) & 1) != 0;
      corners[r][i] = far ? static_cast<double>(shape[static_cast<size_t>(r)] - 1) : 0.0;
    }
  }
  const at::Tensor in_new = at::matmul(solve(out, in, affine, "Spacing: the affine"), corners);
  const at::Tensor world = at::matmul(in, corners);
  const at::Tensor dist = in_new.slice(0, 0, 3).contiguous();
  const at::Tensor voxel = (in_new.slice(0, 0, 3) / in_new.slice(0, 3, 4)).contiguous();
  auto d = dist.accessor<double, 2>();
  auto v = voxel.accessor<double, 2>();
  Grid grid;
  const auto pixdim_text = [&] {  // for the messages of the bounds below
    return "pixdim=" + value_text(pixdim[0]) + "," + value_text(pixdim[1]) + "," +
           value_text(pixdim[2]);
  };
  for (size_t r = 0; r < 3; ++r) {
    double lo = v[static_cast<int64_t>(r)][0], hi = lo;
    for (int64_t j = 1; j < 8; ++j) {
      lo = std::min(lo, v[static_cast<int64_t>(r)][j]);
      hi = std::max(hi, v[static_cast<int64_t>(r)][j]);
    }
    const double extent = std::nearbyint(hi - lo + 1.0);  // np.round: half to even
    if (!(extent <= 1e9))
      throw std::invalid_argument("Spacing: " + pixdim_text() + " makes an axis of " +
                                  value_text(extent) + " voxels");
    grid.shape[r] = static_cast<int64_t>(extent);
  }
  // Checked before anything is resampled: one float32 channel of the new grid.
  check_fits_in_memory(4.0 * static_cast<double>(grid.shape[0]) *
                           static_cast<double>(grid.shape[1]) * static_cast<double>(grid.shape[2]),
                       "Spacing to " + pixdim_text() + " (a " + std::to_string(grid.shape[0]) +
                           " x " + std::to_string(grid.shape[1]) + " x " +
                           std::to_string(grid.shape[2]) + " grid)");
  // The origin: the first corner that is the smallest along every new axis
  // (np.allclose(min_corner, 0, rtol=1e-3): |x| <= 1e-8), else the centres aligned.
  std::array<double, 3> offset{};
  bool found = false;
  for (int64_t i = 0; i < 8 && !found; ++i) {
    found = true;
    for (int64_t r = 0; r < 3; ++r) {
      double min_corner = d[r][0] - d[r][i];
      for (int64_t j = 1; j < 8; ++j) min_corner = std::min(min_corner, d[r][j] - d[r][i]);
      found = found && std::abs(min_corner) <= 1e-8;
    }
    if (found) {
      for (int64_t r = 0; r < 3; ++r) offset[static_cast<size_t>(r)] = world[r][i].item<double>();
    }
  }
  auto o = out.accessor<double, 2>();
  for (size_t r = 0; r < 3; ++r) {
    const auto k = static_cast<int64_t>(r);
    if (!found) {  // in[:3, :3] @ (shape / 2) + in[:3, 3] - out[:3, :3] @ (out_shape / 2)
      double centre_in = 0.0, centre_out = 0.0;
      for (size_t c = 0; c < 3; ++c) {
        centre_in += affine[r][c] * (static_cast<double>(shape[c]) / 2.0);
        centre_out += o[k][static_cast<int64_t>(c)] * (static_cast<double>(grid.shape[c]) / 2.0);
      }
      offset[r] = centre_in + affine[r][3] - centre_out;
    }
    o[k][3] = offset[r];
  }
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 4; ++c)
      grid.affine[r][c] = o[static_cast<int64_t>(r)][static_cast<int64_t>(c)];
  return grid;
}

namespace detail {

bool maps_axes_to_axes(const at::Tensor& theta) {
  const auto t = theta.accessor<double, 3>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 3; ++c)
      if (r != c && t[0][r][c] != 0.0) return false;
  return true;
}

at::Tensor resample_theta(const std::array<int64_t, 3>& in_shape, const Affine& in_affine,
                          const Grid& grid) {
  check_grid_shape(grid);
  const at::Tensor xform = solve(affine_tensor(in_affine, "resample: the image's affine"),
                                 affine_tensor(grid.affine, "resample: the grid's affine"),
                                 in_affine, "resample: the image's affine");
  return theta_of(xform, in_shape, grid.shape);
}

SpatialImage resample_in_slabs(const SpatialImage& image, const Grid& grid, Interpolation mode,
                               int64_t slab_voxels, bool separable) {
  const std::array<int64_t, 3> in_shape = spatial_shape(image.data);
  check_grid_shape(grid);
  const at::Tensor src = affine_tensor(image.affine, "resample: the image's affine");
  const at::Tensor dst = affine_tensor(grid.affine, "resample: the grid's affine");
  const at::Tensor xform = solve(src, dst, image.affine, "resample: the image's affine");
  // spatial_resample's affine_unchanged: the image as it is, its own affine kept.
  if (grid.shape == in_shape && (at::allclose(src, dst, 1e-5, kAffineTol) ||
                                 at::allclose(xform, at::eye(4, at::kDouble), 1e-5, kAffineTol))) {
    return {image.data.to(at::kFloat), image.affine};
  }
  const at::Tensor theta = theta_of(xform, in_shape, grid.shape);
  const int64_t depth = grid.shape[0], height = grid.shape[1], width = grid.shape[2];
  const int64_t plane = height * width;
  at::Tensor out = at::empty({image.data.size(0), depth, height, width}, at::kFloat);
  const at::Tensor lin_w = linspace_from_neg_one(width), lin_h = linspace_from_neg_one(height),
                   lin_d = linspace_from_neg_one(depth);
  const int64_t planes =
      std::max<int64_t>(1, (std::max(slab_voxels, kMinSlabVoxels) + plane - 1) / plane);
  if (separable && maps_axes_to_axes(theta)) {
    // Spacing's case: each output axis samples one input axis, so three tables
    // of coordinates and weights replace the float64 grid (24 bytes a voxel)
    // and the float64 copy of the input, and the result keeps every bit.
    const auto t = theta.accessor<double, 3>();
    const AxisSamples x = axis_samples(lin_w, t[0][0][0], t[0][0][3], in_shape[2]);
    const AxisSamples y = axis_samples(lin_h, t[0][1][1], t[0][1][3], in_shape[1]);
    const AxisSamples z = axis_samples(lin_d, t[0][2][2], t[0][2][3], in_shape[0]);
    const bool nearest = mode == Interpolation::kNearest;
    const at::Tensor input = image.data.scalar_type() == at::kFloat
                                 ? image.data.contiguous()
                                 : image.data.to(at::kDouble).contiguous();
    const std::array<int64_t, 4> strides{input.stride(0), input.stride(1), input.stride(2),
                                         input.stride(3)};
    float* o = out.data_ptr<float>();
    at::parallel_for(0, depth, planes, [&](int64_t begin, int64_t end) {
      if (input.scalar_type() == at::kFloat) {
        sample_separable(input.data_ptr<float>(), strides, input.size(0), z, y, x, nearest, begin,
                         end, o, grid.shape);
      } else {
        sample_separable(input.data_ptr<double>(), strides, input.size(0), z, y, x, nearest, begin,
                         end, o, grid.shape);
      }
    });
    return {out, grid.affine};
  }
  const at::Tensor theta_t = theta.transpose(1, 2);
  const at::Tensor input = image.data.to(at::kDouble).contiguous().unsqueeze(0);
  const int64_t interpolation =
      mode == Interpolation::kNearest ? 1 : 0;  // GridSamplerInterpolation
  constexpr int64_t kBorder = 1;                // GridSamplerPadding
  // MONAI samples the whole grid at once (one thread: grid_sampler_3d splits
  // over the batch only). Slabs bound the float64 grid's memory and share the
  // work; each slab's base grid and bmm are make_base_grid_5D's and
  // affine_grid_generator_5D's rows, and grid_sampler treats voxels alone.
  const int64_t slabs = std::max<int64_t>(1, depth / planes);  // the last slab takes the rest
  at::parallel_for(0, slabs, 1, [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      const int64_t begin = s * planes, end = s + 1 == slabs ? depth : begin + planes;
      at::Tensor base = at::empty({1, end - begin, height, width, 4}, at::kDouble);
      base.select(-1, 0).copy_(lin_w);
      base.select(-1, 1).copy_(lin_h.unsqueeze(-1));
      base.select(-1, 2).copy_(lin_d.slice(0, begin, end).unsqueeze(-1).unsqueeze(-1));
      base.select(-1, 3).fill_(1);
      const at::Tensor sampling = base.view({1, (end - begin) * plane, 4})
                                      .bmm(theta_t)
                                      .view({1, end - begin, height, width, 3});
      out.slice(1, begin, end)
          .copy_(at::grid_sampler(input, sampling, interpolation, kBorder, false).squeeze(0));
    }
  });
  return {out, grid.affine};
}

}  // namespace detail

SpatialImage resample(const SpatialImage& image, const Grid& grid, Interpolation mode) {
  return detail::resample_in_slabs(image, grid, mode, kSlabVoxels, /*separable=*/true);
}

SpatialImage spacing(const SpatialImage& image, const std::array<double, 3>& pixdim,
                     Interpolation mode) {
  return resample(image, spacing_grid(spatial_shape(image.data), image.affine, pixdim), mode);
}

}  // namespace volshard
