#pragma once
// MONAI's tutorial augmentations, each a pure function of a per-sample seed:
// random transforms first sample their parameters, then apply them.
//
//   StreamRng rng = SeedStreams(seed).sample(index, epoch);
//   auto crops = sample_pos_neg_crops(shape, indices, options, rng);  // parameters
//   Sample patch = apply_crop(sample, crops[0], 0);                   // pixels

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "volshard/core/affine.h"
#include "volshard/core/seed_streams.h"
#include "volshard/transforms/sample.h"

namespace volshard {

// ---- Pending views -------------------------------------------------------

/// Applies sample.view: image and label become new contiguous tensors of the
/// view's shape (same dtypes and device), and the label indices, which
/// indexed the source, are dropped. A sample without a view (or with the
/// identity) is returned as it is.
Sample materialize(Sample sample);

/// How materialize_into moves voxels.
enum class Gather {
  /// Host kernels (one pass per tensor, cache-blocked where the view
  /// transposes the source) for CPU tensors of float32 and uint8; tensor ops
  /// for any other device or dtype.
  kAuto,
  /// Tensor ops on any device (slice, flip, permute, copy_): the GPU path's
  /// code, on the CPU too, where it gives the host kernels' bits.
  kTensorOps,
};

/// Writes the sample (its view, or the whole volume) into `image` and `label`:
/// contiguous tensors of shape C x view shape, which may differ from the
/// source's dtype (a uint8 label into a float32 batch row) and device (a
/// host sample into a GPU batch row). Throws std::invalid_argument naming the
/// tensor whose destination does not fit, std::out_of_range if the view
/// leaves the source.
void materialize_into(const Sample& sample, at::Tensor& image, at::Tensor& label,
                      Gather how = Gather::kAuto);

/// The sample's view: sample.view, else the identity over the image.
SpatialMap view_of(const Sample& sample);
/// The spatial shape the sample has: its view's, else the image's.
std::array<int64_t, 3> view_shape(const Sample& sample);

// ---- ScaleIntensity -------------------------------------------------------

struct ScaleIntensityOptions {
  double minv = 0.0;
  double maxv = 1.0;
};

/// Min-max rescale of the image to [minv, maxv], global over channels, in
/// float32 (MONAI ScaleIntensity). A constant image becomes image * minv
/// (zeros by default); NaN anywhere gives NaN everywhere, as MONAI.
at::Tensor scale_intensity(const at::Tensor& image, const ScaleIntensityOptions& options = {});
/// The same values written over `image` when it is dense float32 (any
/// strides: a file-order view too), else replaced by scale_intensity(image).
/// For a tensor nothing else shares, e.g. one just read.
void scale_intensity_(at::Tensor& image, const ScaleIntensityOptions& options = {});

// ---- ScaleIntensityRange (CT windows) ---------------------------------------

struct ScaleIntensityRangeOptions {
  double a_min = 0.0;  ///< input window, e.g. -57 HU
  double a_max = 1.0;  ///< e.g. 164 HU; a_max == a_min only shifts (MONAI warns there too)
  double b_min = 0.0;  ///< output range
  double b_max = 1.0;
  bool clip = false;  ///< clamp the output to [b_min, b_max]
};

/// MONAI's ScaleIntensityRange on a float32 image: (x - a_min) / (a_max -
/// a_min) * (b_max - b_min) + b_min, then the clamp, each step in float32 in
/// MONAI's order (bit-identical to MONAI 1.4 on torch 1.13).
at::Tensor scale_intensity_range(const at::Tensor& image,
                                 const ScaleIntensityRangeOptions& options);

// ---- NormalizeIntensity (MRI) -----------------------------------------------

struct NormalizeIntensityOptions {
  /// Given mean and standard deviation (one value, or one per channel with
  /// channel_wise); empty: computed from the image (population std).
  std::vector<double> subtrahend, divisor;
  bool nonzero = false;       ///< statistics over, and changes to, non-zero voxels only
  bool channel_wise = false;  ///< each channel on its own
};

/// MONAI's NormalizeIntensity: (x - mean) / std over the selected voxels, in
/// float32; a std of 0 divides by 1; an all-zero selection is left as it is.
/// Throws std::invalid_argument naming the option when a per-channel list
/// does not match the channels.
at::Tensor normalize_intensity(const at::Tensor& image, const NormalizeIntensityOptions& options);

// ---- RandCropByPosNegLabel ------------------------------------------------

struct PosNegCropOptions {
  std::array<int64_t, 3> spatial_size{96, 96, 96};  ///< <= 0: the image's size
  double pos = 1.0;                                 ///< >= 0
  double neg = 1.0;                                 ///< >= 0, pos + neg > 0
  int64_t num_samples = 1;                          ///< >= 1
  double image_threshold = 0.0;  ///< background is image > threshold when use_image_threshold
  bool use_image_threshold =
      false;                   ///< MONAI's image_key: restrict background to image > threshold
  bool allow_smaller = false;  ///< a crop larger than the image shrinks to it instead of failing
  void validate() const;       ///< throws std::invalid_argument naming the value
};

struct CropParams {
  bool foreground = false;          ///< the centre was drawn from the foreground
  std::array<int64_t, 3> voxel{};   ///< the drawn voxel, before clamping
  std::array<int64_t, 3> centre{};  ///< after clamping
  std::array<int64_t, 3> start{};   ///< in [0, L - size]
  std::array<int64_t, 3> size{};
};

/// MONAI's map_binary_to_indices over a C x X x Y x Z label (and optionally
/// the image, for use_image_threshold). One pass over contiguous memory.
LabelIndices label_indices(const at::Tensor& label, const at::Tensor* image = nullptr,
                           double image_threshold = 0.0);

/// The crop size after spatial_size <= 0 and allow_smaller are applied; throws
/// std::invalid_argument naming both sizes if a crop exceeds the image.
std::array<int64_t, 3> crop_size(const std::array<int64_t, 3>& shape,
                                 const PosNegCropOptions& options);

/// MONAI's correct_crop_centers for one axis: lo = s // 2, hi = trunc(L + 1 - s / 2),
/// hi += 1 if lo == hi, centre = min(max(c, lo), hi - 1).
int64_t clamp_crop_centre(int64_t centre, int64_t size, int64_t length);

/// Draws num_samples crops: each independently takes the foreground with
/// probability pos / (pos + neg) (one uniform_double), then a uniform voxel of
/// that class (one below(count)), unravels it C-order and clamps it. With no
/// foreground (or no background) it warns once per `warned` flag and uses the
/// other class; with neither it throws std::invalid_argument.
std::vector<CropParams> sample_pos_neg_crops(const std::array<int64_t, 3>& shape,
                                             const LabelIndices& indices,
                                             const PosNegCropOptions& options, StreamRng& rng,
                                             std::atomic<bool>* warned = nullptr);

/// One strided copy of the crop from image and label; meta records it.
Sample apply_crop(const Sample& sample, const CropParams& crop, int64_t patch_index);
/// The same crop, left pending in sample.view (no pixel is copied).
Sample crop_lazy(const Sample& sample, const CropParams& crop, int64_t patch_index);

// ---- CropForeground ---------------------------------------------------------

/// A box of voxels: [start, end) per spatial axis.
struct VoxelBox {
  std::array<int64_t, 3> start{};
  std::array<int64_t, 3> end{};
};

/// MONAI's generate_spatial_bounding_box with select_fn x > 0 over every
/// channel of `source` (C x X x Y x Z), grown by `margin` voxels per side and
/// clamped to the volume (MONAI 1.4's allow_smaller=True). No foreground: an
/// empty box at the origin, as MONAI.
VoxelBox foreground_box(const at::Tensor& source, int64_t margin = 0);

/// A volume with its voxel-to-world affine.
struct SpatialImage {
  at::Tensor data;  ///< C x X x Y x Z
  Affine affine{};
};

/// The box cut out of the image, the affine moved so that every voxel keeps
/// its world position (MONAI's CropForeground, MetaTensor affine).
SpatialImage crop_box(const SpatialImage& image, const VoxelBox& box);

/// MONAI's SpatialPad(spatial_size, method "symmetric", mode "constant" 0):
/// each spatial axis shorter than size[a] grows to it, (size - L) // 2 zeros
/// before and the rest after; an axis already as long, or size[a] <= 0, is
/// kept. The affine moves so that every voxel keeps its world position.
SpatialImage spatial_pad(const SpatialImage& image, const std::array<int64_t, 3>& size);

// ---- Orientation ------------------------------------------------------------

/// nibabel's io_orientation: for each voxel axis, the world axis (0 = x L/R,
/// 1 = y P/A, 2 = z I/S) it is closest to, and +1 or -1 (pointing R/A/S or
/// L/P/I). Throws std::invalid_argument for a singular affine.
std::array<std::array<int, 2>, 3> io_orientation(const Affine& affine);
/// nibabel's aff2axcodes: "RAS", "LPS", "PSR", ...
std::string axcodes(const Affine& affine);
/// The one rule for axis codes, nibabel's axcodes2ornt with its default
/// labels (MONAI's Orientation passes them on): three upper-case letters of
/// L/R, P/A, I/S naming each world axis once. Throws std::invalid_argument
/// "<what> <why>" otherwise (what: "--orientation=ras", ...).
void check_axcodes(const std::string& codes, const std::string& what);

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

// ---- Labels -------------------------------------------------------------------

/// Which label values make up the BraTS regions (tumour core, whole tumour,
/// enhancing tumour).
enum class BratsLabels {
  kBrats,      ///< 1 necrotic core, 2 edema, 4 enhancing: TC 1|4, WT 1|2|4, ET 4 (MONAI 1.4's
               ///< ConvertToMultiChannelBasedOnBratsClasses)
  kDecathlon,  ///< Task01: 1 edema, 2 non-enhancing, 3 enhancing: TC 2|3, WT 1|2|3, ET 3
};

/// A 1 x X x Y x Z label map as three channels (TC, WT, ET) of 0/1, uint8 for
/// a uint8 label, else float32. Throws std::invalid_argument for C != 1.
at::Tensor brats_channels(const at::Tensor& label, BratsLabels scheme);

/// A 1 x X x Y x Z map of class indices as num_classes channels of 0/1,
/// float32 (MONAI's one_hot). Throws std::invalid_argument naming the first
/// value that is not an integer in [0, num_classes).
at::Tensor one_hot(const at::Tensor& label, int64_t num_classes);

// ---- RandSpatialCrop ------------------------------------------------------

/// A uniformly placed crop of `size` (each start uniform in [0, L - size]).
CropParams sample_spatial_crop(const std::array<int64_t, 3>& shape,
                               const std::array<int64_t, 3>& size, StreamRng& rng);

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

// ---- RandScaleIntensity, RandShiftIntensity -------------------------------

struct RandIntensityOptions {
  double lo = -0.1;  ///< the value is uniform in [lo, hi)
  double hi = 0.1;
  double prob = 1.0;      ///< in [0, 1]
  void validate() const;  ///< throws std::invalid_argument naming the value
};

struct RandIntensityParams {
  bool apply = false;  ///< uniform_double() < prob, drawn first, as MONAI
  double value = 0.0;  ///< then lo + (hi - lo) * uniform_double(), drawn even when not applied
};

RandIntensityParams sample_rand_intensity(const RandIntensityOptions& options, StreamRng& rng);

// ---- Compose --------------------------------------------------------------

/// One step of a pipeline. A step may turn one sample into several (crops).
class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::vector<Sample> operator()(Sample sample, StreamRng& rng) const = 0;
  /// As operator(), with the same draws, but crops, rotations and flips may
  /// stay pending in sample.view (see materialize). The default materialises
  /// the input and calls operator().
  virtual std::vector<Sample> lazy(Sample sample, StreamRng& rng) const;
  virtual std::string name() const = 0;
};

std::shared_ptr<const Transform> make_scale_intensity(ScaleIntensityOptions options = {});
std::shared_ptr<const Transform> make_rand_crop_by_pos_neg_label(PosNegCropOptions options);
/// num_samples independent crops (MONAI's RandSpatialCropSamples; one: RandSpatialCrop).
std::shared_ptr<const Transform> make_rand_spatial_crop(std::array<int64_t, 3> size,
                                                        int64_t num_samples = 1);
std::shared_ptr<const Transform> make_rand_rotate90(Rotate90Options options);
std::shared_ptr<const Transform> make_rand_flip(FlipOptions options);
/// MONAI's RandScaleIntensity(factors): image * (1 + factor), in float32.
std::shared_ptr<const Transform> make_rand_scale_intensity(RandIntensityOptions options);
/// MONAI's RandShiftIntensity(offsets): image + offset, in float32.
std::shared_ptr<const Transform> make_rand_shift_intensity(RandIntensityOptions options);
/// NormalizeIntensity as a step (on the crop, as MONAI's BraTS pipeline).
std::shared_ptr<const Transform> make_normalize_intensity(NormalizeIntensityOptions options);

/// Runs the steps in order; step t draws from its own stream
/// StreamRng(mix64(sample_seed + (t + 1) * kGoldenGamma)), so changing a later
/// step never changes an earlier one's draws. Output depends only on the
/// sample and its seed: the same on any thread. Thread-safe (const).
class Compose {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> steps);
  std::vector<Sample> operator()(Sample sample, uint64_t sample_seed) const;
  /// The same samples with crops, rotations and flips still pending in
  /// sample.view, so that the pixels move once, into their batch row
  /// (materialize_into). materialize(lazy(s, seed)[k]) == (*this)(s, seed)[k].
  std::vector<Sample> lazy(Sample sample, uint64_t sample_seed) const;
  size_t size() const { return steps_.size(); }

 private:
  std::vector<std::shared_ptr<const Transform>> steps_;
};

}  // namespace volshard
