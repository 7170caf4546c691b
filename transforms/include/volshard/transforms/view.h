#pragma once
// Crops, quarter turns and flips pending as views of a sample (SpatialMap),
// applied once: materialize, materialize_into. (transforms/src/view.cpp)

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

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

}  // namespace volshard
