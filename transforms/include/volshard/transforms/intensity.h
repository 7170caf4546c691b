#pragma once
// Intensity transforms: MONAI's ScaleIntensity, ScaleIntensityRange (CT
// windows), NormalizeIntensity (MRI), RandScaleIntensity and
// RandShiftIntensity's draws. (transforms/src/intensity.cpp)

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

#include "volshard/core/seed_streams.h"

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

}  // namespace volshard
