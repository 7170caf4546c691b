#include "volshard/datasets/feed.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/core/limits.h"
#include "volshard/core/nearest_name.h"
#include "volshard/datasets/field_json.h"

namespace volshard {
const std::vector<std::pair<std::string, IntensityKind>>& enum_names(IntensityKind) {
  static const std::vector<std::pair<std::string, IntensityKind>> kNames{
      {"none", IntensityKind::kNone},
      {"scale", IntensityKind::kScale},
      {"range", IntensityKind::kRange},
      {"normalize", IntensityKind::kNormalize}};
  return kNames;
}
const std::vector<std::pair<std::string, LabelMap>>& enum_names(LabelMap) {
  static const std::vector<std::pair<std::string, LabelMap>> kNames{
      {"classes", LabelMap::kClasses},
      {"brats", LabelMap::kBrats},
      {"decathlon_brats", LabelMap::kDecathlonBrats}};
  return kNames;
}
const std::vector<std::pair<std::string, NormalizeOn>>& enum_names(NormalizeOn) {
  static const std::vector<std::pair<std::string, NormalizeOn>> kNames{
      {"crop", NormalizeOn::kCrop}, {"volume", NormalizeOn::kVolume}};
  return kNames;
}
const std::vector<std::pair<std::string, CropKind>>& enum_names(CropKind) {
  static const std::vector<std::pair<std::string, CropKind>> kNames{
      {"pos_neg", CropKind::kPosNeg}, {"spatial", CropKind::kSpatial}};
  return kNames;
}
const std::vector<std::pair<std::string, PaddingMode>>& enum_names(PaddingMode) {
  static const std::vector<std::pair<std::string, PaddingMode>> kNames{
      {"zeros", PaddingMode::kZeros},
      {"border", PaddingMode::kBorder},
      {"reflection", PaddingMode::kReflection}};
  return kNames;
}

const std::vector<std::string>& feed_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    const FeedOptions f;
    for_each_feed_field(f, [&k](const Field& field, const auto&) { k.emplace_back(field.key); });
    return k;
  }();
  return keys;
}

namespace {

// One value for every axis, or one per axis; each in [0, hi] ([0, hi) when
// open), naming the field.
void check_per_axis(const char* key, const std::vector<double>& v, size_t n, double hi,
                    bool open_hi) {
  std::string text;
  for (const double x : v) text += (text.empty() ? "" : ",") + value_text(x);
  bool ok = v.size() == 1 || v.size() == n;
  for (const double x : v) ok = ok && x >= 0 && (open_hi ? x < hi : x <= hi);
  if (!ok) {
    throw FieldError(field_ref(key) + "=" + text + " must be one value or " + std::to_string(n) +
                     ", each in [0, " + value_text(hi) + (open_hi ? ")" : "]"));
  }
}

// One value for every axis, or one per axis (as check_per_axis accepted).
template <size_t N>
std::array<double, N> per_axis(const std::vector<double>& v) {
  std::array<double, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = v.size() == 1 ? v[0] : v.at(i);
  return out;
}

}  // namespace

void FeedOptions::validate() const {
  prefix.validate();
  // The schema's bounds, naming the fields ("crop=0 must be >= 1"; a command
  // line shows the flag, "--crop=0").
  for_each_feed_field(*this, CheckFieldBounds{});
  // The ranges (lists): two values lo <= hi.
  const auto range = [](const char* key, const std::vector<double>& v, double lo, bool lo_open,
                        double hi) {
    std::string text;
    for (const double x : v) text += (text.empty() ? "" : ",") + value_text(x);
    const bool ok =
        v.size() == 2 && (lo_open ? v[0] > lo : v[0] >= lo) && v[0] <= v[1] && v[1] <= hi;
    if (!ok) {
      throw FieldError(field_ref(key) + "=" + text + " must be two values lo,hi with " +
                       value_text(lo) + (lo_open ? " < " : " <= ") + "lo <= hi <= " +
                       value_text(hi));
    }
  };
  range("smooth_sigma_x", smooth_sigma_x, 0.0, false, kMaxSmoothSigma);
  range("smooth_sigma_y", smooth_sigma_y, 0.0, false, kMaxSmoothSigma);
  range("smooth_sigma_z", smooth_sigma_z, 0.0, false, kMaxSmoothSigma);
  if (contrast_gamma.size() == 1 && !(contrast_gamma[0] > 0.5)) {  // MONAI's message too
    throw FieldError(field_ref("contrast_gamma") + "=" + value_text(contrast_gamma[0]) +
                     ": one value must be > 0.5 (the range is 0.5 to it)");
  }
  if (contrast_gamma.size() != 1)
    range("contrast_gamma", contrast_gamma, 0.0, true, std::numeric_limits<double>::max());
  {
    std::string text;
    for (const double x : bias_coeff) text += (text.empty() ? "" : ",") + value_text(x);
    if (!(bias_coeff.size() == 2 && std::isfinite(bias_coeff[0]) && std::isfinite(bias_coeff[1]) &&
          bias_coeff[0] <= bias_coeff[1])) {
      throw FieldError(field_ref("bias_coeff") + "=" + text +
                       " must be two finite values lo,hi with lo <= hi");
    }
  }
  range("zoom_range", zoom_range, 0.0, true, kMaxZoom);
  range("elastic_sigma", elastic_sigma, 0.0, true, kMaxElasticSigma);
  range("elastic_magnitude", elastic_magnitude, 0.0, false, kMaxElasticMagnitude);
  if (affine_prob > 0 && elastic_prob > 0) {
    throw FieldError(field_ref("affine_prob") + "=" + value_text(affine_prob) + " and " +
                     field_ref("elastic_prob") + "=" + value_text(elastic_prob) +
                     ": one of them (Rand3DElastic holds the affine and takes its ranges)");
  }
  // RandAffine's ranges: one value or one per axis, each in the transform's bounds.
  check_per_axis("affine_rotate", affine_rotate, 3, kMaxAffineRotate, false);
  check_per_axis("affine_shear", affine_shear, 6, kMaxAffineShear, false);
  check_per_axis("affine_translate", affine_translate, 3, kMaxAffineTranslate, false);
  check_per_axis("affine_scale", affine_scale, 3, kAffineScaleBound, true);
  check_edges(crop, field_ref("crop"), 1, kMaxCropEdge);
  // One channel of this volume's crops, before a batch is even assembled.
  const std::array<int64_t, 3> c = crop_size();
  const double crop_voxels =
      static_cast<double>(c[0]) * static_cast<double>(c[1]) * static_cast<double>(c[2]);
  check_fits_in_memory(
      4.0 * crop_voxels * static_cast<double>(num_samples),
      field_ref("crop") + "=" + edges_text(crop) + " with " + field_ref("num_samples") + "=" +
          std::to_string(num_samples));
}

AffineOptions FeedOptions::affine() const {
  AffineOptions a;
  a.prob = affine_prob;
  a.rotate = per_axis<3>(affine_rotate);
  a.shear = per_axis<6>(affine_shear);
  a.translate = per_axis<3>(affine_translate);
  a.scale = per_axis<3>(affine_scale);
  a.zoom_prob = zoom_prob;
  if (zoom_range.size() == 2) a.zoom = {zoom_range[0], zoom_range[1]};
  a.padding = affine_padding;
  a.elastic_prob = elastic_prob;
  if (elastic_sigma.size() == 2) a.elastic_sigma = {elastic_sigma[0], elastic_sigma[1]};
  if (elastic_magnitude.size() == 2)
    a.elastic_magnitude = {elastic_magnitude[0], elastic_magnitude[1]};
  return a;
}

namespace {

// `base` with the keys of `j` that are pipeline keys; the others are
// refused, or skipped when `skip_others` (a training config's network keys).
FeedOptions apply_feed_json(const nlohmann::json& j, const std::string& who,
                            const FeedOptions& base, bool skip_others) {
  if (!j.is_object()) throw std::invalid_argument(who + "a pipeline must be a JSON object");
  const std::vector<std::string>& keys = feed_keys();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (skip_others || std::find(keys.begin(), keys.end(), it.key()) != keys.end()) continue;
    std::string known;
    for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
    // The key the command line would name for the misspelt flag.
    const std::string nearest = nearest_key(it.key(), keys);
    throw std::invalid_argument(who + "unknown pipeline key '" + printable(it.key()) + "'" +
                                (nearest.empty() ? "" : " (did you mean '" + nearest + "'?)") +
                                "; known: " + known);
  }
  FeedOptions f = base;
  fields_from_json(
      j, who, f, [](FeedOptions& o, auto&& visit) { for_each_feed_field(o, visit); },
      [](const Field&) { return true; });
  try {
    f.validate();
  } catch (const std::invalid_argument& e) {
    throw FieldError(who + quoted(e));
  }
  return f;
}

}  // namespace

void check_crop_fits(const FeedOptions& o, const std::vector<VolumeShape>& volumes,
                     const std::string& after) {
  if (o.allow_smaller) return;
  constexpr size_t kNamed = 8;
  const std::array<int64_t, 3> crop = o.crop_size();
  std::vector<const VolumeShape*> small;
  std::array<int64_t, 3> fits = crop;  // the largest crop every volume holds, per axis
  for (const VolumeShape& v : volumes) {
    bool smaller = false;
    for (size_t a = 0; a < 3; ++a) {
      smaller = smaller || v.shape[a] < crop[a];
      fits[a] = std::min(fits[a], v.shape[a]);
    }
    if (smaller) small.push_back(&v);
  }
  if (small.empty()) return;
  std::string named;
  for (size_t i = 0; i < std::min(small.size(), kNamed); ++i)
    named +=
        (i ? ", " : "") + small[i]->source + " (" + shape_text(small[i]->shape.data(), 3) + ")";
  if (small.size() > kNamed) named += " and " + std::to_string(small.size() - kNamed) + " more";
  const std::string crop_text = edges_text(o.crop);
  throw FieldError("train: " + field_ref("crop") + "=" + crop_text + " is larger than " +
                   std::to_string(small.size()) + " of " + std::to_string(volumes.size()) +
                   " training volume(s) " + after + ": " + named +
                   "; every volume holds a crop of " + shape_text(fits) + ": use " +
                   field_ref("crop") + "=" + edges_text({fits[0], fits[1], fits[2]}) +
                   " or less, " + field_ref("spatial_pad") + "=" + crop_text + " or " +
                   field_ref("allow_smaller"));
}

FeedOptions feed_from_json(const std::string& json_object, const std::string& who,
                           const FeedOptions& base) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_object);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(who + "not valid JSON (" + e.what() + ")");
  }
  return apply_feed_json(j, who, base, false);
}

FeedOptions feed_from_config(const std::string& path, const FeedOptions& base) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, std::string("not valid JSON (") + e.what() + ")");
  }
  return apply_feed_json(j, printable(path) + ": ", base, true);
}

std::string feed_to_json(const FeedOptions& feed) {
  nlohmann::json j = nlohmann::json::object();
  for_each_feed_field(feed, FieldToJson{&j});
  return j.dump();
}

Compose feed_augmentation(const FeedOptions& o) {
  o.validate();
  std::vector<std::shared_ptr<const Transform>> steps;
  if (o.crop_kind == CropKind::kPosNeg) {
    PosNegCropOptions crop;
    crop.spatial_size = o.crop_size();
    crop.num_samples = o.num_samples;
    crop.allow_smaller = o.allow_smaller;
    steps.push_back(make_rand_crop_by_pos_neg_label(crop));
  } else {
    steps.push_back(make_rand_spatial_crop(o.crop_size(), o.num_samples));
  }
  // Right after the crop, while it is still a view of the whole volume.
  if (o.affine_prob > 0 || o.elastic_prob > 0 || o.zoom_prob > 0)
    steps.push_back(make_rand_affine(o.affine()));
  if (o.rot90_prob > 0) {
    Rotate90Options rot;
    rot.prob = o.rot90_prob;
    rot.max_k = 3;
    rot.spatial_axes = {0, 2};
    steps.push_back(make_rand_rotate90(rot));
  }
  if (o.flip_prob > 0) {
    for (int64_t axis = 0; axis < 3; ++axis) {
      FlipOptions flip;
      flip.prob = o.flip_prob;
      flip.spatial_axes = {axis};
      steps.push_back(make_rand_flip(flip));
    }
  }
  if (o.prefix.intensity == IntensityKind::kNormalize &&
      o.prefix.normalize_on == NormalizeOn::kCrop)
    steps.push_back(make_normalize_intensity(o.prefix.normalize));
  // The intensity augmentations in nnU-Net's order, which MONAI's DynUNet
  // (nnU-Net) tutorial keeps: noise, blur, brightness (scale, then MONAI
  // BraTS's shift), then contrast (gamma). A step that is off takes no
  // stream, so the steps before and after it draw as they did without it.
  if (o.noise_prob > 0) {
    GaussianNoiseOptions noise;
    noise.prob = o.noise_prob;
    noise.std = o.noise_std;
    steps.push_back(make_rand_gaussian_noise(noise));
  }
  if (o.smooth_prob > 0) {
    GaussianSmoothOptions smooth;
    smooth.prob = o.smooth_prob;
    const std::vector<double>* sigma[] = {&o.smooth_sigma_x, &o.smooth_sigma_y, &o.smooth_sigma_z};
    for (size_t d = 0; d < 3; ++d) smooth.sigma[d] = {(*sigma[d])[0], (*sigma[d])[1]};
    steps.push_back(make_rand_gaussian_smooth(smooth));
  }
  if (o.rand_scale > 0)
    steps.push_back(make_rand_scale_intensity({-o.rand_scale, o.rand_scale, o.rand_scale_prob}));
  if (o.rand_shift > 0)
    steps.push_back(make_rand_shift_intensity({-o.rand_shift, o.rand_shift, o.rand_shift_prob}));
  if (o.contrast_prob > 0) {
    AdjustContrastOptions contrast;
    contrast.prob = o.contrast_prob;
    contrast.gamma = o.contrast_gamma.size() == 1
                         ? std::array<double, 2>{0.5, o.contrast_gamma[0]}
                         : std::array<double, 2>{o.contrast_gamma[0], o.contrast_gamma[1]};
    steps.push_back(make_rand_adjust_contrast(contrast));
  }
  // After the contrast (the last step: the steps before draw as they did).
  if (o.bias_prob > 0) {
    BiasFieldOptions bias;
    bias.prob = o.bias_prob;
    bias.degree = o.bias_degree;
    bias.coeff = {o.bias_coeff[0], o.bias_coeff[1]};
    steps.push_back(make_rand_bias_field(bias));
  }
  return Compose(std::move(steps));
}

PairOptions feed_prefix(const FeedOptions& o) {
  PairOptions p;
  p.prefix = o.prefix;
  p.defer_normalize = o.prefix.normalize_on == NormalizeOn::kCrop;
  p.label_indices = o.crop_kind == CropKind::kPosNeg;
  p.compact_label = true;  // uint8 in the cache; the loader's batches are float32
  return p;
}

PairOptions whole_volume_prefix(const PrefixOptions& prefix) {
  PairOptions p;
  p.prefix = prefix;
  p.prefix.spatial_pad.clear();  // a training step: the sliding window pads by itself
  p.label_indices = false;
  p.image_layout = VolumeLayout::kContiguous;
  return p;
}

}  // namespace volshard
