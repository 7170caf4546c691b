#pragma once
// Label maps: BraTS region channels and one-hot. (transforms/src/labels.cpp)

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace volshard {

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

}  // namespace volshard
