#include "volshard/datasets/load_pair.h"

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "volshard/core/error.h"
#include "volshard/core/limits.h"

namespace volshard {
namespace {

std::array<int64_t, 3> spatial_of(const at::Tensor& t) { return {t.size(1), t.size(2), t.size(3)}; }

std::string spatial_text(const at::Tensor& t) { return shape_text(spatial_of(t)); }

// Every value an integer in [0, classes): the first one that is not is named.
void check_label_values(const at::Tensor& label, int64_t classes, const std::string& file) {
  if (classes <= 0 || label.numel() == 0) return;
  const at::Tensor flat = label.reshape({-1});
  if (at::isFloatingType(flat.scalar_type())) {
    const at::Tensor bad = (flat != flat.round()).logical_or(flat < 0).logical_or(flat >= classes);
    if (bad.any().item<bool>()) {
      const int64_t at_voxel = bad.nonzero()[0][0].item<int64_t>();
      fail_file(file, "label value " + value_text(flat[at_voxel].item<double>()) + " (voxel " +
                          std::to_string(at_voxel) + ") is not a class index in [0, " +
                          std::to_string(classes) + ")");
    }
    return;
  }
  const int64_t hi = flat.max().item<int64_t>(), lo = flat.min().item<int64_t>();
  if (lo < 0 || hi >= classes)
    fail_file(file, "label value " + std::to_string(lo < 0 ? lo : hi) +
                        " is not a class index in [0, " + std::to_string(classes) + ")");
}

// Orientation and Spacing (trilinear) of a float32 image, each grid recorded in `t`.
SpatialImage regrid(SpatialImage v, const PrefixOptions& o, PrefixTrace& t) {
  t.stored = {spatial_of(v.data), v.affine};
  if (!o.orientation.empty() && axcodes(v.affine) != o.orientation) v = orient(v, o.orientation);
  t.oriented = {spatial_of(v.data), v.affine};
  if (!o.pixdim.empty()) {
    const Grid grid =
        spacing_grid(spatial_of(v.data), v.affine, {o.pixdim[0], o.pixdim[1], o.pixdim[2]});
    if (grid.shape != spatial_of(v.data) || grid.affine != v.affine)
      v = resample(v, grid, Interpolation::kBilinear);
  }
  t.spaced = {spatial_of(v.data), v.affine};
  t.box = {{0, 0, 0}, t.spaced.shape};
  return v;
}

// A label (on the image's stored grid) moved as `t` says the image was: the
// same orientation, nearest resampling onto the spaced grid, CropForeground's
// box (which the image's values chose). invert_prefix is the way back.
SpatialImage follow_trace(SpatialImage v, const std::string& orientation, const PrefixTrace& t) {
  if (t.oriented.affine != t.stored.affine) v = orient(v, orientation);
  if (t.spaced.shape != t.oriented.shape || t.spaced.affine != t.oriented.affine) {
    const at::ScalarType dtype = v.data.scalar_type();
    v = resample({v.data.to(at::kFloat), v.affine}, t.spaced, Interpolation::kNearest);
    v.data = v.data.to(dtype);  // nearest: the same values
  }
  if (t.box.start != std::array<int64_t, 3>{} || t.box.end != t.spaced.shape)
    v = crop_box(v, t.box);
  return v;
}

// The intensity transform (normalisation unless deferred) on a float32 image.
void apply_intensity(at::Tensor& image, const PairOptions& o) {
  switch (o.prefix.intensity) {
    case IntensityKind::kNone:
      return;
    case IntensityKind::kScale:
      scale_intensity_(image);  // in place when the tensor is dense float32
      return;
    case IntensityKind::kRange:
      image = scale_intensity_range(image, o.prefix.range);
      return;
    case IntensityKind::kNormalize:
      if (!o.defer_normalize) image = normalize_intensity(image, o.prefix.normalize);
      return;
  }
}

bool reorients(const PrefixOptions& o) { return !o.orientation.empty() || !o.pixdim.empty(); }

}  // namespace

void PrefixOptions::validate() const {
  if (!orientation.empty()) check_axcodes(orientation, "--orientation=" + printable(orientation));
  if (!pixdim.empty()) {
    bool ok = pixdim.size() == 3;
    for (double v : pixdim) ok = ok && std::isfinite(v) && v > 0;
    if (!ok) {
      std::string text;
      for (double v : pixdim) text += (text.empty() ? "" : ",") + value_text(v);
      throw std::invalid_argument("--pixdim=" + text +
                                  " must be three spacings in mm, each > 0 (e.g. 1.5,1.5,2)");
    }
  }
  if (intensity == IntensityKind::kRange && !(range.a_min <= range.a_max))
    throw std::invalid_argument("--a-min=" + value_text(range.a_min) +
                                " must be <= --a-max=" + value_text(range.a_max));
  if (foreground_margin < 0)
    throw std::invalid_argument("--foreground-margin=" + std::to_string(foreground_margin) +
                                " must be >= 0");
  bool pad_ok = spatial_pad.empty() || spatial_pad.size() == 1 || spatial_pad.size() == 3;
  for (int64_t v : spatial_pad) pad_ok = pad_ok && v >= 0 && v <= kMaxPadEdge;
  if (!pad_ok) {
    std::string text;
    for (int64_t v : spatial_pad) text += (text.empty() ? "" : ",") + std::to_string(v);
    throw std::invalid_argument("--spatial-pad=" + text +
                                " must be one size or three (x,y,z), each in [0, " +
                                std::to_string(kMaxPadEdge) + "] voxels (0: that axis as it is)");
  }
  const std::array<int64_t, 3> pad = pad_size();
  check_fits_in_memory(
      4.0 * static_cast<double>(pad[0]) * static_cast<double>(pad[1]) * static_cast<double>(pad[2]),
      "--spatial-pad=" + shape_text(pad));
}

std::array<int64_t, 3> PrefixOptions::pad_size() const {
  if (spatial_pad.empty()) return {0, 0, 0};
  if (spatial_pad.size() == 1) return {spatial_pad[0], spatial_pad[0], spatial_pad[0]};
  return {spatial_pad[0], spatial_pad[1], spatial_pad[2]};
}

std::string PrefixOptions::key() const {
  std::string k;
  if (!orientation.empty()) k += "; orientation " + orientation;
  if (!pixdim.empty())
    k += "; spacing " + value_text(pixdim[0]) + "," + value_text(pixdim[1]) + "," +
         value_text(pixdim[2]);
  switch (intensity) {
    case IntensityKind::kNone:
      break;
    case IntensityKind::kScale:
      k += "; scale_intensity [0, 1]";
      break;
    case IntensityKind::kRange:
      k += "; range [" + value_text(range.a_min) + ", " + value_text(range.a_max) + "] -> [" +
           value_text(range.b_min) + ", " + value_text(range.b_max) + "]" +
           (range.clip ? " clip" : "");
      break;
    case IntensityKind::kNormalize:
      k += std::string("; normalize") + (normalize.nonzero ? " nonzero" : "") +
           (normalize.channel_wise ? " channel_wise" : "") +
           (normalize_on == NormalizeOn::kVolume ? " volume" : "");
      break;
  }
  if (crop_foreground) k += "; crop_foreground margin " + std::to_string(foreground_margin);
  if (const auto pad = pad_size(); pad != std::array<int64_t, 3>{})
    k += "; spatial_pad " + shape_text(pad);
  if (labels == LabelMap::kBrats) k += "; labels brats 1/2/4";
  if (labels == LabelMap::kDecathlonBrats) k += "; labels decathlon brats 1/2/3";
  return k;
}

std::string PairOptions::config_key() const {
  // The layout is not part of the key: it changes strides, not values.
  std::string k = prefix.key();
  if (prefix.intensity == IntensityKind::kNormalize && defer_normalize) k += " (deferred)";
  return std::string("load float32") + k +
         (compact_label ? "; label uint8 if it fits" : "; label float32") +
         (label_indices ? "; label_indices" : "");
}

SpatialImage prepare_image(const Volume& image, const PairOptions& o, PrefixTrace* trace) {
  PrefixTrace local;
  PrefixTrace& t = trace ? *trace : local;
  const at::Tensor data =
      image.data.scalar_type() == at::kFloat ? image.data : image.data.to(at::kFloat);
  SpatialImage v = regrid({data, image.affine}, o.prefix, t);
  apply_intensity(v.data, o);
  if (o.prefix.crop_foreground) {
    t.box = foreground_box(v.data, o.prefix.foreground_margin);
    v = crop_box(v, t.box);
  }
  return v;
}

at::Tensor invert_prefix(const at::Tensor& prediction, const PrefixTrace& t, Interpolation mode) {
  at::Tensor x = prediction;
  const std::array<int64_t, 3> box_shape{
      t.box.end[0] - t.box.start[0], t.box.end[1] - t.box.start[1], t.box.end[2] - t.box.start[2]};
  if (spatial_of(x) != box_shape)
    throw std::invalid_argument("invert_prefix: prediction " + spatial_text(x) +
                                " differs from the prepared grid " + shape_text(box_shape));
  if (box_shape != t.spaced.shape) {  // CropForeground undone: zeros outside the box
    at::Tensor full = at::zeros(
        {x.size(0), t.spaced.shape[0], t.spaced.shape[1], t.spaced.shape[2]}, x.options());
    full.slice(1, t.box.start[0], t.box.end[0])
        .slice(2, t.box.start[1], t.box.end[1])
        .slice(3, t.box.start[2], t.box.end[2])
        .copy_(x);
    x = full;
  }
  SpatialImage v{x, t.spaced.affine};
  if (t.spaced.shape != t.oriented.shape || t.spaced.affine != t.oriented.affine) {
    if (v.data.scalar_type() != at::kFloat) v.data = v.data.to(at::kFloat);
    v = resample(v, t.oriented, mode);
  }
  if (t.oriented.affine != t.stored.affine) v = orient(v, axcodes(t.stored.affine));
  return v.data.scalar_type() == prediction.scalar_type() ? v.data
                                                          : v.data.to(prediction.scalar_type());
}

Sample load_pair(const ImageLabelPair& pair, int64_t index, const PairOptions& options) {
  const PrefixOptions& p = options.prefix;
  ReadOptions image_read, label_read;
  image_read.as_float = label_read.as_float = true;
  image_read.max_voxels = label_read.max_voxels = options.max_voxels;
  // Orientation and Spacing make a new tensor anyway: read C order for them.
  image_read.layout = reorients(p) ? VolumeLayout::kContiguous : options.image_layout;
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
  if (label.data.size(0) != 1 && p.labels != LabelMap::kClasses)
    fail_file(pair.label, "has " + std::to_string(label.data.size(0)) +
                              " channels; the BraTS label mapping needs one map of labels");
  check_label_values(label.data, p.num_classes, pair.label);
  Sample s;
  PrefixTrace trace;
  SpatialImage img = prepare_image(image, options, &trace);
  SpatialImage lab = follow_trace({label.data, image.affine}, p.orientation, trace);
  const std::array<int64_t, 3> pad = p.pad_size();
  if (pad != std::array<int64_t, 3>{}) {  // training's batching step: not in the trace
    img = spatial_pad(img, pad);
    lab = spatial_pad(lab, pad);
  }
  s.image = img.data;
  s.meta.affine = img.affine;
  s.label = std::move(lab.data);
  if (p.labels != LabelMap::kClasses)
    s.label = brats_channels(
        s.label, p.labels == LabelMap::kBrats ? BratsLabels::kBrats : BratsLabels::kDecathlon);
  if (options.label_indices)
    s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  s.meta.index = index;
  s.meta.source = pair.image;
  return s;
}

}  // namespace volshard
