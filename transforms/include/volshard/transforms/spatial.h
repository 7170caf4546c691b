#pragma once
// Grids and axes: MONAI's Orientation, Spacing (transforms/src/spatial.cpp,
// resample.cpp), RandRotate90 and RandFlip's draws and views, RandAffine and
// RandZoom sampled around the crop (warp.cpp).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "volshard/core/affine.h"
#include "volshard/core/orientation.h"
#include "volshard/core/seed_streams.h"
#include "volshard/transforms/sample.h"
#include "volshard/transforms/view.h"

namespace volshard {

// ---- Orientation ------------------------------------------------------------

// io_orientation, axcodes and check_axcodes: volshard/core/orientation.h.

/// MONAI's Orientation(axcodes): the voxel axes permuted and flipped so that
/// they point along `axcodes` (three distinct letters of L/R, P/A, I/S), the
/// affine updated to keep world positions. Exact (no interpolation). Throws
/// std::invalid_argument naming the codes.
SpatialImage orient(const SpatialImage& image, const std::string& axcodes);

// ---- Spacing -----------------------------------------------------------------

enum class Interpolation { kBilinear, kNearest };  ///< trilinear in 3D, as MONAI's "bilinear"

/// A voxel grid: its spatial shape and voxel-to-world affine.
struct Grid {
  std::array<int64_t, 3> shape{};
  Affine affine{};
};

/// The grid MONAI's Spacing(pixdim) resamples onto: the affine's axis
/// directions kept and scaled to `pixdim` mm, shape and origin from the input
/// corners (MONAI's zoom_affine and compute_shape_offset). Throws
/// std::invalid_argument naming the value for a pixdim <= 0 or a singular
/// affine.
Grid spacing_grid(const std::array<int64_t, 3>& shape, const Affine& affine,
                  const std::array<double, 3>& pixdim);

/// The image (C x X x Y x Z, float32) resampled onto `grid`: each output
/// voxel's world position mapped into the input's voxels and interpolated
/// (trilinear or nearest), positions outside taking the border value, as
/// MONAI's Spacing. Float32 out; a grid equal to the image's own returns the
/// data unchanged.
SpatialImage resample(const SpatialImage& image, const Grid& grid, Interpolation mode);

/// MONAI's Spacing(pixdim, mode): resample(image, spacing_grid(...), mode).
SpatialImage spacing(const SpatialImage& image, const std::array<double, 3>& pixdim,
                     Interpolation mode);

// ---- RandRotate90 ---------------------------------------------------------

struct Rotate90Options {
  double prob = 0.1;
  int64_t max_k = 3;                          ///< k uniform in [1, max_k]
  std::array<int64_t, 2> spatial_axes{0, 1};  ///< the tutorial uses {0, 2}
  void validate() const;
};

struct Rotate90Params {
  int64_t k = 0;  ///< drawn first, as MONAI, even when not applied
  bool apply = false;
};

/// k = 1 + below(max_k) first, then apply = uniform_double() < prob.
Rotate90Params sample_rotate90(const Rotate90Options& options, StreamRng& rng);
/// torch.rot90(x, k, (1 + axes[0], 1 + axes[1])) on image and label, contiguous.
Sample apply_rotate90(Sample sample, const Rotate90Params& params, const Rotate90Options& options);
/// The same rotation, left pending in sample.view.
Sample rotate90_lazy(Sample sample, const Rotate90Params& params, const Rotate90Options& options);

// ---- RandFlip -------------------------------------------------------------

struct FlipOptions {
  double prob = 0.1;
  std::vector<int64_t> spatial_axes{0, 1,
                                    2};  ///< flipped together when applied (MONAI: None = all)
  void validate() const;
};

/// apply = uniform_double() < prob.
bool sample_flip(const FlipOptions& options, StreamRng& rng);
Sample apply_flip(Sample sample, bool apply, const FlipOptions& options);
/// The same flip, left pending in sample.view.
Sample flip_lazy(Sample sample, bool apply, const FlipOptions& options);

// ---- RandAffine and RandZoom, around the crop --------------------------------

/// Where a resampled crop reads outside the volume: grid_sample's padding_mode
/// as MONAI names it.
enum class PaddingMode { kZeros, kBorder, kReflection };

/// The bounds of AffineOptions' ranges, one set that the transform and the
/// flags (datasets' FeedOptions) both check: rotate, shear and translate in
/// [0, max], scale in [0, 1), the zoom 0 < lo <= hi <= kMaxZoom.
inline constexpr double kMaxAffineRotate = 3.141592653589793;  ///< radians
inline constexpr double kMaxAffineShear = 4.0;
inline constexpr double kMaxAffineTranslate = 4096.0;  ///< voxels
inline constexpr double kAffineScaleBound = 1.0;       ///< open: 1 + v must stay > 0
inline constexpr double kMaxZoom = 10.0;
/// Rand3DElastic's bounds: sigma in (0, kMaxElasticSigma] voxels (the filter
/// spans 6 sigma + 1), magnitude in [0, kMaxElasticMagnitude].
inline constexpr double kMaxElasticSigma = 32.0;
inline constexpr double kMaxElasticMagnitude = 10000.0;

struct AffineOptions {
  double prob = 0.0;                     ///< RandAffine's prob; 0: no affine
  std::array<double, 3> rotate{};        ///< rotate_range about x, y, z, radians: uniform(-v, v)
  std::array<double, 6> shear{};         ///< shear_range, MONAI's six coefficients: uniform(-v, v)
  std::array<double, 3> translate{};     ///< translate_range x, y, z, voxels: uniform(-v, v)
  std::array<double, 3> scale{};         ///< scale_range x, y, z: 1 + uniform(-v, v), v < 1
  double zoom_prob = 0.0;                ///< RandZoom's prob; 0: no zoom
  std::array<double, 2> zoom{1.0, 1.0};  ///< the zoom, uniform in [lo, hi], one for every axis
  /// MONAI's Rand3DElastic in place of RandAffine (one of the two probs is
  /// 0): with elastic_prob, a random offset field, Gaussian-smoothed (sigma
  /// uniform in elastic_sigma) and scaled (magnitude uniform in
  /// elastic_magnitude), moves each output voxel before the affine above.
  double elastic_prob = 0.0;
  std::array<double, 2> elastic_sigma{5.0, 8.0};          ///< lo, hi voxels (MONAI's sigma_range)
  std::array<double, 2> elastic_magnitude{100.0, 200.0};  ///< lo, hi (MONAI's magnitude_range)
  /// MONAI's RandAffine default; RandZoom's "edge" padding is kBorder.
  PaddingMode padding = PaddingMode::kReflection;
  void validate() const;  ///< throws std::invalid_argument naming the value
};

struct AffineParams {
  bool apply = false;  ///< RandAffine's coin
  std::array<double, 3> rotate{};
  std::array<double, 6> shear{};
  std::array<double, 3> translate{};
  std::array<double, 3> scale{1.0, 1.0, 1.0};
  bool zoom_apply = false;  ///< RandZoom's coin
  double zoom = 1.0;
  bool elastic = false;    ///< Rand3DElastic's coin (then `apply` too: its affine)
  double magnitude = 0.0;  ///< Rand3DElastic's draws
  double sigma = 0.0;
  uint64_t field_key = 0;  ///< its offset field's key (uniform_field)
};

/// A 4 x 4 matrix, row-major.
using Matrix4 = std::array<double, 16>;

/// The draws, each made whether its coin says yes or not (a fixed count):
/// uniform_double() < prob (elastic_prob for Rand3DElastic); rotate x, y, z;
/// shear 0-5; translate x, y, z; scale x, y, z (each lo + (hi - lo) *
/// uniform_double() over (-v, v), scale plus 1); then uniform_double() <
/// zoom_prob; zoom lo + (hi - lo) * uniform_double(); then, with elastic_prob
/// > 0 only (a RandAffine's stream is unchanged), magnitude and sigma (lo +
/// (hi - lo) * uniform_double() each) and the field's key (next_u64()).
AffineParams sample_affine(const AffineOptions& options, StreamRng& rng);

/// Rand3DElastic's offsets, output voxels, 3 x X x Y x Z float32 on the
/// field's device: MONAI's GaussianFilter(3, sigma, truncated 3) of `field`
/// (uniform in [-1, 1), 3 x X x Y x Z) times float32(magnitude).
at::Tensor elastic_offsets(const at::Tensor& field, double sigma, double magnitude);

/// What maps the output's voxel coordinates, centred, to the input's:
/// RandZoom's diag(1/zoom) (zoom > 1 enlarges) times MONAI's AffineGrid
/// R @ Sh @ T @ S (create_rotate: x, then y, then z; create_shear,
/// create_translate, create_scale). Identity for a step whose coin said no.
Matrix4 affine_matrix(const AffineParams& params);

/// The sample's view (a pending crop, turned or flipped or not; the whole
/// volume without one) resampled through `matrix` about its centre: output
/// voxel j reads the view at M (j - c) + c, c = (size - 1) / 2, interpolated
/// in the whole source volume (grid_sample: bilinear image, nearest label,
/// align_corners false, as MONAI's Resample), so a rotated or zoomed-out crop
/// shows the volume around it, and only outside the volume is `padding`
/// used. Host tensors (float32 image; uint8 or float32 label) take one fused
/// pass computing each voxel's position in float64; any other device or
/// dtype, or `how` kTensorOps, builds the grid and runs ATen's grid_sampler
/// on the box of source voxels it needs (the GPU cache's path): the two agree
/// within float32 rounding of the positions. The result is contiguous, of the
/// view's shape, with no view and no label indices; the label keeps its dtype.
///
/// With `offsets` (3 x the view's shape, elastic_offsets), output voxel j
/// reads M (j + offsets(j) - c) + c: MONAI's Rand3DElastic, which adds them
/// to its grid before the affine.
Sample warp_view(Sample sample, const Matrix4& matrix, PaddingMode padding,
                 Gather how = Gather::kAuto, const at::Tensor& offsets = {});

}  // namespace volshard
