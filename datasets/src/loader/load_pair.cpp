#include "volshard/datasets/load_pair.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

std::string spatial_text(const at::Tensor& t) {
  return std::to_string(t.size(1)) + "x" + std::to_string(t.size(2)) + "x" +
         std::to_string(t.size(3));
}

}  // namespace

std::string PairOptions::config_key() const {
  // The layout is not part of the key: it changes strides, not values.
  return std::string("load float32") + (scale_intensity ? "; scale_intensity [0, 1]" : "") +
         (compact_label ? "; label uint8 if it fits" : "; label float32") +
         (label_indices ? "; label_indices" : "");
}

Sample load_pair(const ImageLabelPair& pair, int64_t index, const PairOptions& options) {
  ReadOptions image_read, label_read;
  image_read.as_float = label_read.as_float = true;
  image_read.max_voxels = label_read.max_voxels = options.max_voxels;
  image_read.layout = options.image_layout;
  image_read.count_nonfinite = false;  // ScaleIntensity sees NaN itself
  label_read.layout = VolumeLayout::kContiguous;
  label_read.uint8_if_it_fits = options.compact_label;
  Volume image = read_volume(pair.image, image_read);
  Volume label = read_volume(pair.label, label_read);
  if (image.data.sizes().slice(1) != label.data.sizes().slice(1)) {
    throw std::runtime_error("image " + pair.image + " has spatial shape " +
                             spatial_text(image.data) + " but label " + pair.label + " has " +
                             spatial_text(label.data));
  }
  Sample s;
  s.image = std::move(image.data);
  if (options.scale_intensity) scale_intensity_(s.image);  // in place: the tensor was just read
  s.label = std::move(label.data);
  if (options.label_indices)
    s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  s.meta.index = index;
  s.meta.source = pair.image;
  return s;
}

}  // namespace volshard
