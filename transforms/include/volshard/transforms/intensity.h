#pragma once
// Intensity transforms: MONAI's ScaleIntensity, ScaleIntensityRange (CT
// windows), NormalizeIntensity (MRI), RandScaleIntensity and
// RandShiftIntensity's draws, RandGaussianNoise, RandGaussianSmooth,
// RandAdjustContrast and RandBiasField. (transforms/src/intensity.cpp)

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

#include "volshard/core/seed_streams.h"
#include "volshard/transforms/view.h"

namespace volshard {

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

// ---- RandGaussianNoise ----------------------------------------------------

struct GaussianNoiseOptions {
  double prob = 0.1;       ///< in [0, 1] (MONAI's default)
  double mean = 0.0;       ///< finite
  double std = 0.1;        ///< >= 0, finite
  bool sample_std = true;  ///< the spread is uniform in [0, std) (MONAI 1.4's default), else std
  void validate() const;   ///< throws std::invalid_argument naming the value
};

struct GaussianNoiseParams {
  bool apply = false;      ///< uniform_double() < prob, drawn first, as MONAI
  double std = 0.0;        ///< then std * uniform_double() (or std), drawn even when not applied
  uint64_t noise_key = 0;  ///< then next_u64(): the noise field's key (gaussian_noise_field)
};

GaussianNoiseParams sample_gaussian_noise(const GaussianNoiseOptions& options, StreamRng& rng);

/// Standard normal float64 values of `shape` on `device`, a function of `key`
/// and each value's flat C-order index only (an integer hash, then
/// Box-Muller; value 2i and 2i + 1 from pair i), so the integers behind them
/// are the same on every device and thread count, and a smaller field is a
/// prefix of a larger one. Throws std::invalid_argument past 2^33 values.
/// On the CPU (kAuto) one host loop makes it; kTensorOps (any other device)
/// makes the same integers with tensor ops, and the values agree to float64
/// rounding of log, cos and sin.
at::Tensor gaussian_noise_field(at::IntArrayRef shape, uint64_t key, c10::Device device,
                                Gather how = Gather::kAuto);

/// MONAI's RandGaussianNoise once drawn: float32(image) + float32(mean + std * z),
/// the noise made in float64 and rounded once, as MONAI's numpy noise. `z`:
/// standard normal values of the image's shape, any floating dtype, on its device.
at::Tensor add_gaussian_noise(const at::Tensor& image, double mean, double std,
                              const at::Tensor& z);

/// The same with the field of `key`: add_gaussian_noise(image, mean, std,
/// gaussian_noise_field(image's shape, key, image's device)), on the host in
/// one pass that makes the field a cache-sized chunk at a time (the same bits,
/// no float64 volume).
at::Tensor add_gaussian_noise(const at::Tensor& image, double mean, double std, uint64_t key);

// ---- RandGaussianSmooth ---------------------------------------------------

/// The largest sigma RandGaussianSmooth takes (its kernel spans 8 sigma + 1 voxels).
inline constexpr double kMaxSmoothSigma = 100.0;

struct GaussianSmoothOptions {
  /// Per spatial axis (X, Y, Z), sigma uniform in [lo, hi), voxels;
  /// 0 <= lo <= hi <= kMaxSmoothSigma.
  std::array<std::array<double, 2>, 3> sigma{{{0.25, 1.5}, {0.25, 1.5}, {0.25, 1.5}}};
  double prob = 0.1;      ///< in [0, 1] (MONAI's default)
  void validate() const;  ///< throws std::invalid_argument naming the value
};

struct GaussianSmoothParams {
  bool apply = false;  ///< uniform_double() < prob, drawn first, as MONAI
  /// Then X, Y, Z, one uniform_double() each, drawn even when not applied.
  std::array<double, 3> sigma{};
};

GaussianSmoothParams sample_gaussian_smooth(const GaussianSmoothOptions& options, StreamRng& rng);

/// MONAI's gaussian_1d(sigma, truncated, approx "erf"), unnormalised: 2 tail + 1
/// float32 taps, tail = int(max(truncated float32(sigma), 0.5) + 0.5), on `device`.
at::Tensor gaussian_kernel_1d(double sigma, c10::Device device, double truncated = 4.0);

/// MONAI's GaussianSmooth(sigma) (GaussianFilter, approx "erf", truncated 4;
/// Rand3DElastic's filter truncates at 3): float32, each channel zero-padded
/// and filtered along X, then Y, then Z; on the image's device. On the CPU
/// (kAuto) three host passes (the same sums, in their own order: within
/// float32 rounding of MONAI's); kTensorOps (any other device) MONAI's own
/// grouped convolutions.
at::Tensor gaussian_smooth(const at::Tensor& image, const std::array<double, 3>& sigma,
                           double truncated = 4.0, Gather how = Gather::kAuto);

/// Uniform values in [-1, 1) of `shape`, rounded once to float32 (as MONAI's
/// numpy field), from `key` and each value's flat C-order index only (the
/// integer hash of gaussian_noise_field): the same on every device and thread
/// count (Rand3DElastic's offset field), bit for bit: a host loop on the CPU
/// (kAuto), tensor ops elsewhere (kTensorOps). Throws past 2^32 values.
at::Tensor uniform_field(at::IntArrayRef shape, uint64_t key, c10::Device device,
                         Gather how = Gather::kAuto);

// ---- RandAdjustContrast ---------------------------------------------------

struct AdjustContrastOptions {
  double prob = 0.1;                      ///< in [0, 1] (MONAI's default)
  std::array<double, 2> gamma{0.5, 4.5};  ///< uniform in [lo, hi), 0 < lo <= hi, finite
  bool invert_image = false;              ///< MONAI 1.4's default
  bool retain_stats = false;              ///< MONAI 1.4's default
  void validate() const;                  ///< throws std::invalid_argument naming the value
};

struct AdjustContrastParams {
  bool apply = false;  ///< uniform_double() < prob, drawn first, as MONAI
  double gamma = 1.0;  ///< then lo + (hi - lo) * uniform_double(), drawn even when not applied
};

AdjustContrastParams sample_adjust_contrast(const AdjustContrastOptions& options, StreamRng& rng);

/// MONAI 1.4's AdjustContrast, op for op in float32: ((x - min) / float(range +
/// 1e-7)) ** gamma * range + min, global over channels; invert_image negates
/// before and after; retain_stats restores the input's mean and (unbiased) std.
at::Tensor adjust_contrast(const at::Tensor& image, double gamma, bool invert_image = false,
                           bool retain_stats = false);

// ---- RandBiasField ----------------------------------------------------------

/// RandBiasField's largest degree: its field has (d + 1)(d + 2)(d + 3) / 6 terms (286 at 10).
inline constexpr int64_t kMaxBiasFieldDegree = 10;

struct BiasFieldOptions {
  double prob = 0.1;   ///< in [0, 1] (MONAI's default)
  int64_t degree = 3;  ///< in [1, kMaxBiasFieldDegree] (MONAI's default)
  /// Each coefficient uniform in [lo, hi); finite, lo <= hi (MONAI's coeff_range).
  std::array<double, 2> coeff{0.0, 0.1};
  void validate() const;  ///< throws std::invalid_argument naming the value
};

/// The Legendre terms of a degree: (d + 1)(d + 2)(d + 3) / 6.
int64_t bias_field_terms(int64_t degree);

struct BiasFieldParams {
  bool apply = false;  ///< uniform_double() < prob, drawn first, as MONAI
  /// Then bias_field_terms(degree) coefficients, each lo + (hi - lo) *
  /// uniform_double(), drawn even when not applied; coefficient t belongs to
  /// the t-th term P_i(x) P_j(y) P_k(z) with i + j + k <= degree in MONAI's
  /// order (i, then j, then k ascending).
  std::vector<double> coeff;
};

BiasFieldParams sample_bias_field(const BiasFieldOptions& options, StreamRng& rng);

/// MONAI's bias field over a spatial shape, float64 on `device`: the sum over
/// those terms of coeff_t P_i(x) P_j(y) P_k(z), where each axis's coordinates
/// are numpy's float32 linspace(-1, 1, n) (-1 alone for n = 1), evaluated as
/// numpy's leggrid3d (Clenshaw's recursion along x, then y, then z) operation
/// for operation, so the same values as MONAI's on every device. Throws
/// std::invalid_argument when `coeff` does not hold the degree's terms.
at::Tensor bias_field(const std::array<int64_t, 3>& shape, int64_t degree,
                      const std::vector<double>& coeff, c10::Device device);

/// MONAI's RandBiasField once drawn: float32(image * exp(field)), the product
/// in float64 as MONAI's numpy, the same field for every channel, on the
/// image's device. On the CPU (kAuto) a host pass a plane at a time with no
/// float64 volume, the same bits as kTensorOps (bias_field's tensor ops and
/// ATen's exp: any other device). Another device's exp, or numpy's, may round
/// a float64 value a step apart, which moves a float32 result by one step.
at::Tensor apply_bias_field(const at::Tensor& image, int64_t degree,
                            const std::vector<double>& coeff, Gather how = Gather::kAuto);

}  // namespace volshard
