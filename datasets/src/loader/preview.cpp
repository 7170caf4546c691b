#include "volshard/datasets/preview.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/core/png.h"
#include "volshard/core/seed_streams.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

constexpr int kTile = 192;    // pixels per slice
constexpr int kCaption = 37;  // up to three lines
constexpr int kLine = 11;     // pixels a caption line

// Grey levels from the 0.5th to the 99.5th percentile of `values` (MRI maxima
// are outliers; z-scored crops run below 0 and above 1).
std::pair<float, float> grey_window(const at::Tensor& values) {
  const at::Tensor sorted = std::get<0>(values.flatten().to(at::kFloat).sort());
  const int64_t n = sorted.numel();
  return {sorted[n / 200].item<float>(), sorted[n - 1 - n / 200].item<float>()};
}

at::Tensor to_grey(const at::Tensor& image, std::pair<float, float> window) {
  return (image - window.first) / std::max(window.second - window.first, 1e-6f);
}

// The short name of an applied random step in a caption (MONAI's name where
// there is no short one).
std::string short_step_name(const std::string& monai) {
  static const std::pair<const char*, const char*> kShort[] = {
      {"RandAffine", "affine"},         {"RandZoom", "zoom"},
      {"Rand3DElastic", "elastic"},     {"RandGaussianNoise", "noise"},
      {"RandGaussianSmooth", "smooth"}, {"RandScaleIntensity", "scale"},
      {"RandShiftIntensity", "shift"},  {"RandAdjustContrast", "gamma"},
      {"RandBiasField", "bias"}};
  for (const auto& [name, short_name] : kShort)
    if (monai == name) return short_name;
  return monai;
}

// A 2D float slice in [0, 1] as a grey tile (nearest-neighbour upscaled)
// with the boundaries of `classes` (an integer slice, 0 background) drawn in
// `colour`, two pixels wide: a pixel of a class > 0 with a 4-neighbour of
// another class (the edge of a binary mask; with several classes also the
// line between two of them).
Canvas draw_slice(const at::Tensor& image, const at::Tensor& classes, Rgb colour) {
  const at::Tensor img = image.contiguous();
  const at::Tensor lab = classes.to(at::kByte).contiguous();
  const int64_t rows = img.size(0), cols = img.size(1);
  const float* g = img.data_ptr<float>();
  const uint8_t* m = lab.data_ptr<uint8_t>();
  auto source = [&](int t, int64_t n) { return std::min<int64_t>(t * n / kTile, n - 1); };
  auto class_at = [&](int x, int y) -> uint8_t {
    if (x < 0 || y < 0 || x >= kTile || y >= kTile) return 0;
    return m[source(y, rows) * cols + source(x, cols)];
  };
  Canvas tile(kTile, kTile);
  for (int y = 0; y < kTile; ++y) {
    for (int x = 0; x < kTile; ++x) {
      const float v = std::clamp(g[source(y, rows) * cols + source(x, cols)], 0.0f, 1.0f);
      const auto grey = static_cast<uint8_t>(std::lround(v * 255.0f));
      tile.set(x, y, {grey, grey, grey});
    }
  }
  for (int y = 0; y < kTile; ++y) {
    for (int x = 0; x < kTile; ++x) {
      const uint8_t c = class_at(x, y);
      if (c == 0) continue;
      if (class_at(x - 1, y) == c && class_at(x + 1, y) == c && class_at(x, y - 1) == c &&
          class_at(x, y + 1) == c)
        continue;
      tile.fill_rect(x - 1, y - 1, 2, 2, colour);
    }
  }
  return tile;
}

Canvas draw_slice(const at::Tensor& image, const at::Tensor& label) {
  return draw_slice(image, label > 0.5, {255, 0, 0});
}

// A label or prediction file as class indices (rounded), X x Y x Z.
at::Tensor read_classes(const std::string& path, const char* what) {
  const Volume v = read_volume_as_float(path);
  if (v.data.size(0) != 1)
    fail_file(path, std::string("has ") + std::to_string(v.data.size(0)) + " channels; the " +
                        what + " must be one map of class indices");
  const at::Tensor c = v.data[0].round();
  if (c.numel() > 0 && (c.min().item<double>() < 0 || c.max().item<double>() > 255))
    fail_file(path, std::string("holds values outside [0, 255]: not a map of class indices"));
  return c.to(at::kByte);
}

}  // namespace

std::string preview_caption(const SampleMeta& m, int64_t channel) {
  const std::string file = m.source.empty() ? "vol " + std::to_string(m.index)
                                            : std::filesystem::path(m.source).filename().string();
  std::string line1 = file + " patch " + std::to_string(m.patch_index);
  if (channel >= 0) line1 += " ch " + std::to_string(channel);
  if (m.rot90_k != 0) line1 += " rot90 k=" + std::to_string(m.rot90_k);
  const std::string line2 =
      "at " + std::to_string(m.crop_start[0]) + "," + std::to_string(m.crop_start[1]) + "," +
      std::to_string(m.crop_start[2]) + " centre drawn from " + (m.foreground_centre ? "fg" : "bg");
  // The random steps applied to this crop, in the pipeline's order.
  std::string steps;
  auto add = [&](const std::string& step) { steps += (steps.empty() ? "" : " ") + step; };
  for (const auto& step : m.spatial) add(short_step_name(step.first));
  std::string flips;
  for (int a = 0; a < 3; ++a)
    if (m.flipped[a]) flips += std::string(flips.empty() ? "" : ",") + "xyz"[a];
  if (!flips.empty()) add("flip " + flips);
  for (const auto& step : m.intensity) add(short_step_name(step.first));
  return printable(line1) + "\n" + line2 + (steps.empty() ? "" : "\n" + steps);
}

int64_t write_preview(const PreviewOptions& o) {
  for_each_preview_field(o, CheckFieldBounds{"preview"});  // the table's bounds
  if (o.data_dir.empty() == o.datalist.empty())
    throw FieldError("preview: give exactly one of " + field_ref("data") + " (a folder) and " +
                     field_ref("datalist") + " (a file)");
  const Compose pipeline = feed_augmentation(o.feed);  // validates, before any file is listed
  const auto pairs = o.datalist.empty() ? pairs_from_folder(o.data_dir, o.image_glob, o.label_glob)
                                        : pairs_from_datalist(o.datalist, "training");
  const SeedStreams streams(o.seed);
  std::vector<Sample> crops;
  for (size_t i = 0; i < pairs.size() && static_cast<int64_t>(crops.size()) < o.count; ++i) {
    Sample s = load_pair(pairs[i], static_cast<int64_t>(i), feed_prefix(o.feed));
    if (o.channel >= s.image.size(0))
      throw FieldError("preview: " + field_ref("channel") + "=" + std::to_string(o.channel) +
                       " but " + printable(pairs[i].image) + " has " +
                       std::to_string(s.image.size(0)) + " channel(s)");
    for (auto& c : pipeline(std::move(s), streams.sample_seed(static_cast<int64_t>(i), o.epoch))) {
      if (c.meta.source.empty()) c.meta.source = pairs[i].image;
      if (static_cast<int64_t>(crops.size()) < o.count) crops.push_back(std::move(c));
    }
  }
  // Every channel (or the chosen one) of a crop, axial and coronal each; four
  // tiles a row, a crop's tiles together.
  int64_t channels = 1;
  for (const auto& c : crops) channels = std::max(channels, c.image.size(0));
  const int64_t shown = o.channel >= 0 ? 1 : channels;
  const int per_crop = static_cast<int>(2 * shown);
  const int per_row = std::max(1, 4 / per_crop);
  const int columns = per_row * per_crop;
  const int rows = static_cast<int>((static_cast<int>(crops.size()) + per_row - 1) / per_row);
  // One grey window per channel over every crop shown, so that the intensity
  // steps' effects stay visible from crop to crop.
  std::vector<std::pair<float, float>> windows;
  for (int64_t ch = 0; ch < channels; ++ch) {
    std::vector<at::Tensor> values;
    for (const auto& c : crops)
      if (ch < c.image.size(0)) values.push_back(c.image[ch].flatten());
    windows.push_back(values.empty() ? std::pair{0.0f, 1.0f} : grey_window(at::cat(values)));
  }
  Canvas sheet(columns * kTile, rows * (kTile + kCaption));
  for (size_t k = 0; k < crops.size(); ++k) {
    const Sample& c = crops[k];
    const int64_t mid_z = c.image.size(3) / 2, mid_y = c.image.size(2) / 2;
    const int x = static_cast<int>(k % static_cast<size_t>(per_row)) * per_crop * kTile,
              y = static_cast<int>(k / static_cast<size_t>(per_row)) * (kTile + kCaption);
    for (int64_t j = 0; j < shown; ++j) {
      const int64_t ch = o.channel >= 0 ? o.channel : std::min(j, c.image.size(0) - 1);
      const at::Tensor image = to_grey(c.image[ch], windows[static_cast<size_t>(ch)]);
      sheet.paste(draw_slice(image.select(2, mid_z), c.label[0].select(2, mid_z)),
                  x + static_cast<int>(2 * j) * kTile, y + kCaption);
      sheet.paste(draw_slice(image.select(1, mid_y), c.label[0].select(1, mid_y)),
                  x + static_cast<int>(2 * j + 1) * kTile, y + kCaption);
      if (shown > 1)
        sheet.text(x + static_cast<int>(2 * j) * kTile + 4, y + kCaption + 4,
                   "ch " + std::to_string(ch), {255, 255, 0});
    }
    const std::string caption = preview_caption(c.meta, o.channel) + "\n";
    size_t begin = 0;
    for (int line = 0; begin < caption.size(); ++line) {
      const size_t end = caption.find('\n', begin);
      sheet.text(x + 4, y + 3 + line * kLine,
                 caption.substr(begin, end - begin) + (line == 0 ? "  axial | coronal" : ""),
                 {30, 30, 30});
      begin = end + 1;
    }
  }
  write_png(o.out, sheet);
  return static_cast<int64_t>(crops.size());
}

std::vector<double> write_prediction_preview(const PredictionPreviewOptions& o) {
  const Volume image = read_volume_as_float(o.image);
  if (o.channel < 0 || o.channel >= image.data.size(0))
    throw FieldError("preview: " + field_ref("channel") + "=" + std::to_string(o.channel) +
                     " but " + printable(o.image) + " has " + std::to_string(image.data.size(0)) +
                     " channel(s)");
  const at::Tensor label = read_classes(o.label, "label");
  const at::Tensor prediction = read_classes(o.prediction, "prediction");
  const at::Tensor img = image.data[o.channel];
  for (const auto& [path, t] : {std::pair{o.label, label}, std::pair{o.prediction, prediction}}) {
    if (t.sizes() != img.sizes())
      throw std::runtime_error("preview: " + printable(path) + " has shape " +
                               shape_text(t.sizes().vec()) + " but the image " +
                               printable(o.image) + " has " + shape_text(img.sizes().vec()));
  }
  const at::Tensor grey = to_grey(img, grey_window(img));
  // Per-class Dice of the prediction against the label (NaN: class in neither).
  const int64_t classes = std::max(label.max().item<int64_t>(), prediction.max().item<int64_t>());
  std::vector<double> dice;
  std::string dice_text;
  for (int64_t c = 1; c <= classes; ++c) {
    const at::Tensor g = label == c, p = prediction == c;
    const double both = (g & p).sum().item<double>(),
                 total = g.sum().item<double>() + p.sum().item<double>();
    dice.push_back(total > 0 ? 2 * both / total : std::numeric_limits<double>::quiet_NaN());
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%lld %.3f", c == 1 ? "" : ", ", static_cast<long long>(c),
                  dice.back());
    dice_text += buf;
  }
  // The slices through the label's foreground centre (the volume's without).
  std::array<int64_t, 3> centre{img.size(0) / 2, img.size(1) / 2, img.size(2) / 2};
  const at::Tensor fg = (label > 0).nonzero();
  if (fg.size(0) > 0) {
    const at::Tensor mean = fg.to(at::kDouble).mean(0);
    for (size_t a = 0; a < 3; ++a)
      centre[a] = std::llround(mean[static_cast<int64_t>(a)].item<double>());
  }
  static const char* const kNames[3] = {"sagittal", "coronal", "axial"};
  Canvas sheet(2 * kTile, 3 * (kTile + kCaption) + kCaption);
  sheet.text(4, 3,
             std::filesystem::path(o.image).filename().string() + "  Dice per class " +
                 (dice_text.empty() ? "(no classes)" : dice_text),
             {30, 30, 30});
  sheet.text(4, 14, "left: label (red)   right: prediction (green)", {30, 30, 30});
  for (int a = 0; a < 3; ++a) {
    const int64_t at_voxel = centre[static_cast<size_t>(a)];
    const int y = kCaption + a * (kTile + kCaption);
    sheet.paste(draw_slice(grey.select(a, at_voxel), label.select(a, at_voxel), {255, 0, 0}), 0,
                y + kCaption);
    sheet.paste(draw_slice(grey.select(a, at_voxel), prediction.select(a, at_voxel), {0, 200, 0}),
                kTile, y + kCaption);
    sheet.text(4, y + 8, std::string(kNames[a]) + " slice " + std::to_string(at_voxel),
               {30, 30, 30});
  }
  write_png(o.out, sheet);
  return dice;
}

}  // namespace volshard
