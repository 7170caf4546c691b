#include "volshard/datasets/load_pair.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "volshard/core/error.h"
#include "volshard/core/limits.h"
#include "volshard/datasets/feed.h"
#include "volshard/datasets/field_json.h"
#include "volshard/datasets/out_of_memory.h"

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

Grid grid_of(const SpatialImage& v) { return {spatial_of(v.data), v.affine}; }

// A label (on the image's stored grid) moved as `t` says the image was: the
// same orientations, nearest resampling onto each spaced grid, CropForeground's
// boxes (which the image's values chose), in the order they ran.
// invert_prefix is the way back.
SpatialImage follow_trace(SpatialImage v, const std::string& orientation, const PrefixTrace& t) {
  for (const PrefixTrace::Move& m : t.moves) {
    switch (m.kind) {
      case PrefixStep::kOrientation:
        v = orient(v, orientation);
        break;
      case PrefixStep::kSpacing: {
        const at::ScalarType dtype = v.data.scalar_type();
        v = resample({v.data.to(at::kFloat), v.affine}, m.after, Interpolation::kNearest);
        v.data = v.data.to(dtype);  // nearest: the same values
        break;
      }
      case PrefixStep::kCropForeground:
        v = crop_box(v, m.box);
        break;
      case PrefixStep::kIntensity:
        break;  // moves no grid: never recorded
    }
  }
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

const std::vector<std::pair<std::string, PrefixStep>>& step_names() {
  static const std::vector<std::pair<std::string, PrefixStep>> kNames{
      {"orientation", PrefixStep::kOrientation},
      {"spacing", PrefixStep::kSpacing},
      {"intensity", PrefixStep::kIntensity},
      {"crop_foreground", PrefixStep::kCropForeground}};
  return kNames;
}

std::string step_name(PrefixStep step) {
  for (const auto& [name, named] : step_names())
    if (named == step) return name;
  return "the prefix";
}

}  // namespace

std::vector<PrefixStep> PrefixOptions::steps() const {
  std::string given, names;
  for (const std::string& name : order) given += (given.empty() ? "" : ",") + name;
  for (const auto& [name, step] : step_names()) names += (names.empty() ? "" : ", ") + name;
  std::vector<PrefixStep> out;
  for (const std::string& name : order) {
    const auto& all = step_names();
    const auto it =
        std::find_if(all.begin(), all.end(), [&](const auto& n) { return n.first == name; });
    if (it == all.end() || std::find(out.begin(), out.end(), it->second) != out.end()) {
      throw FieldError(field_ref("prefix_order") + "=" + given + ": '" + printable(name) + "' " +
                       (it == all.end() ? "is not a step" : "is named twice") + "; name each of " +
                       names + " once, in the order they run");
    }
    out.push_back(it->second);
  }
  if (out.size() != step_names().size())
    throw FieldError(field_ref("prefix_order") + "=" + given + ": name each of " + names +
                     " once, in the order they run");
  return out;
}

void PrefixOptions::validate() const {
  for_each_prefix_field(*this, CheckFieldBounds{});  // the schema's bounds (feed.h)
  (void)steps();
  if (!orientation.empty())
    check_axcodes(orientation, field_ref("orientation") + "=" + printable(orientation));
  if (!pixdim.empty()) {
    bool ok = pixdim.size() == 3;
    for (double v : pixdim) ok = ok && std::isfinite(v) && v > 0;
    if (!ok) {
      std::string text;
      for (double v : pixdim) text += (text.empty() ? "" : ",") + value_text(v);
      throw FieldError(field_ref("pixdim") + "=" + text +
                       " must be three spacings in mm, each > 0 (e.g. 1.5,1.5,2)");
    }
  }
  if (intensity == IntensityKind::kRange && !(range.a_min <= range.a_max))
    throw FieldError(field_ref("a_min") + "=" + value_text(range.a_min) + " must be <= " +
                     field_ref("a_max") + "=" + value_text(range.a_max));
  if (!spatial_pad.empty())  // 0: that axis as it is
    check_edges(spatial_pad, field_ref("spatial_pad"), 0, kMaxPadEdge);
  const std::array<int64_t, 3> pad = pad_size();
  check_fits_in_memory(
      4.0 * static_cast<double>(pad[0]) * static_cast<double>(pad[1]) * static_cast<double>(pad[2]),
      field_ref("spatial_pad") + "=" + shape_text(pad));
}

std::array<int64_t, 3> PrefixOptions::pad_size() const { return cube_or_xyz(spatial_pad); }

std::string PrefixOptions::key() const {
  // From the schema, not a list of fields: a new row is in the key unless it
  // says it changes no value (Field::not_in_cache_key).
  return cache_key_text(
      *this, [](const PrefixOptions& p, auto&& visit) { for_each_prefix_field(p, visit); });
}

std::string PairOptions::config_key() const {
  // The layout is not part of the key: it changes strides, not values.
  std::string k = "; prefix " + prefix.key();
  if (prefix.intensity == IntensityKind::kNormalize && defer_normalize) k += " (deferred)";
  return std::string("load float32") + k +
         (compact_label ? "; label uint8 if it fits" : "; label float32") +
         (label_indices ? "; label_indices" : "");
}

SpatialImage prepare_image(const Volume& image, const PairOptions& o, PrefixTrace* trace) {
  PrefixTrace local;
  PrefixTrace& t = trace ? *trace : local;
  const PrefixOptions& p = o.prefix;
  SpatialImage v{image.data.scalar_type() == at::kFloat ? image.data : image.data.to(at::kFloat),
                 image.affine};
  t.stored = grid_of(v);
  t.moves.clear();
  for (const PrefixStep step : p.steps()) {
    const Grid before = grid_of(v);
    VoxelBox box;
    std::string doing;  // for an allocation that fails: the step, and the grid it makes
    naming_allocation_failures(
        [&] { return doing.empty() ? step_name(step) : doing; },
        [&] {
          switch (step) {
            case PrefixStep::kOrientation:
              if (!p.orientation.empty() && axcodes(v.affine) != p.orientation)
                v = orient(v, p.orientation);
              break;
            case PrefixStep::kSpacing:
              if (!p.pixdim.empty()) {
                const Grid grid =
                    spacing_grid(before.shape, v.affine, {p.pixdim[0], p.pixdim[1], p.pixdim[2]});
                doing = "Spacing to a " + shape_text(grid.shape) + " grid";
                if (grid.shape != before.shape || grid.affine != v.affine)
                  v = resample(v, grid, Interpolation::kBilinear);
              }
              break;
            case PrefixStep::kIntensity:
              apply_intensity(v.data, o);
              break;
            case PrefixStep::kCropForeground:
              if (p.crop_foreground) {
                box = foreground_box(v.data, p.foreground_margin);
                v = crop_box(v, box);
              }
              break;
          }
        });
    const Grid after = grid_of(v);
    if (after.shape != before.shape || after.affine != before.affine)
      t.moves.push_back({step, before, after, box});
  }
  return v;
}

at::Tensor invert_prefix(const at::Tensor& prediction, const PrefixTrace& t, Interpolation mode) {
  if (spatial_of(prediction) != t.prepared().shape)
    throw std::invalid_argument("invert_prefix: prediction " + spatial_text(prediction) +
                                " differs from the prepared grid " +
                                shape_text(t.prepared().shape));
  SpatialImage v{prediction, t.prepared().affine};
  for (auto m = t.moves.rbegin(); m != t.moves.rend(); ++m) {
    switch (m->kind) {
      case PrefixStep::kCropForeground: {  // zeros outside the box
        at::Tensor full =
            at::zeros({v.data.size(0), m->before.shape[0], m->before.shape[1], m->before.shape[2]},
                      v.data.options());
        full.slice(1, m->box.start[0], m->box.end[0])
            .slice(2, m->box.start[1], m->box.end[1])
            .slice(3, m->box.start[2], m->box.end[2])
            .copy_(v.data);
        v = {full, m->before.affine};
        break;
      }
      case PrefixStep::kSpacing:
        if (v.data.scalar_type() != at::kFloat) v.data = v.data.to(at::kFloat);
        v = resample(v, m->before, mode);
        break;
      case PrefixStep::kOrientation:
        v = orient(v, axcodes(m->before.affine));
        break;
      case PrefixStep::kIntensity:
        break;
    }
  }
  return v.data.scalar_type() == prediction.scalar_type() ? v.data
                                                          : v.data.to(prediction.scalar_type());
}

namespace {

Sample prepare_pair(Volume image, Volume label, const ImageLabelPair& pair, int64_t index,
                    const PairOptions& options) {
  const PrefixOptions& p = options.prefix;
  Sample s;
  PrefixTrace trace;
  SpatialImage img = prepare_image(image, options, &trace);
  SpatialImage lab;
  lab = naming_allocation_failures(
      [&] {
        return "its label " + pair.label + " moved onto the " + spatial_text(img.data) + " grid";
      },
      [&] {
        return follow_trace({label.data, image.affine}, p.orientation, trace);
      });
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

}  // namespace

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
  return naming_allocation_failures(
      [&] { return pair.image; },
      [&] { return prepare_pair(std::move(image), std::move(label), pair, index, options); });
}

}  // namespace volshard
