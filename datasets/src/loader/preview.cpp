#include "volshard/datasets/preview.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/core/error.h"
#include "volshard/core/png.h"
#include "volshard/core/seed_streams.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

constexpr int kTile = 192;    // pixels per slice
constexpr int kCaption = 26;  // two lines

// A 2D float slice in [0, 1] as a grey tile (nearest-neighbour upscaled)
// with the label's outline in red, two pixels wide.
Canvas draw_slice(const at::Tensor& image, const at::Tensor& label) {
  const at::Tensor img = image.contiguous();
  const at::Tensor lab = (label > 0.5).to(at::kByte).contiguous();
  const int64_t rows = img.size(0), cols = img.size(1);
  const float* g = img.data_ptr<float>();
  const uint8_t* m = lab.data_ptr<uint8_t>();
  auto source = [&](int t, int64_t n) { return std::min<int64_t>(t * n / kTile, n - 1); };
  auto inside = [&](int x, int y) {
    if (x < 0 || y < 0 || x >= kTile || y >= kTile) return false;
    return m[source(y, rows) * cols + source(x, cols)] != 0;
  };
  Canvas tile(kTile, kTile);
  for (int y = 0; y < kTile; ++y) {
    for (int x = 0; x < kTile; ++x) {
      const float v = std::clamp(g[source(y, rows) * cols + source(x, cols)], 0.0f, 1.0f);
      const auto grey = static_cast<uint8_t>(std::lround(v * 255.0f));
      tile.set(x, y, {grey, grey, grey});
    }
  }
  // A mask pixel with a neighbour outside the mask (4-connected), then grown
  // by one pixel: the outline.
  for (int y = 0; y < kTile; ++y) {
    for (int x = 0; x < kTile; ++x) {
      if (!inside(x, y)) continue;
      if (inside(x - 1, y) && inside(x + 1, y) && inside(x, y - 1) && inside(x, y + 1)) continue;
      tile.fill_rect(x - 1, y - 1, 2, 2, {255, 0, 0});
    }
  }
  return tile;
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
  return printable(line1) + "\n" + line2;
}

int64_t write_preview(const PreviewOptions& o) {
  if (o.count < 1 || o.count > 256)
    throw std::invalid_argument("preview: --count=" + std::to_string(o.count) +
                                " must be in [1, 256] (crops in one picture)");
  const auto pairs = pairs_from_folder(o.data_dir, o.image_glob, o.label_glob);
  const Compose pipeline = feed_augmentation(o.feed);
  const SeedStreams streams(o.seed);
  std::vector<Sample> crops;
  for (size_t i = 0; i < pairs.size() && static_cast<int64_t>(crops.size()) < o.count; ++i) {
    Sample s = load_pair(pairs[i], static_cast<int64_t>(i), feed_prefix(o.feed));
    if (o.channel >= s.image.size(0))
      throw std::invalid_argument("preview: --channel=" + std::to_string(o.channel) + " but " +
                                  printable(pairs[i].image) + " has " +
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
  Canvas sheet(columns * kTile, rows * (kTile + kCaption));
  for (size_t k = 0; k < crops.size(); ++k) {
    const Sample& c = crops[k];
    const int64_t mid_z = c.image.size(3) / 2, mid_y = c.image.size(2) / 2;
    const int x = static_cast<int>(k % static_cast<size_t>(per_row)) * per_crop * kTile,
              y = static_cast<int>(k / static_cast<size_t>(per_row)) * (kTile + kCaption);
    for (int64_t j = 0; j < shown; ++j) {
      const int64_t ch = o.channel >= 0 ? o.channel : std::min(j, c.image.size(0) - 1);
      const at::Tensor image = c.image[ch];
      sheet.paste(draw_slice(image.select(2, mid_z), c.label[0].select(2, mid_z)),
                  x + static_cast<int>(2 * j) * kTile, y + kCaption);
      sheet.paste(draw_slice(image.select(1, mid_y), c.label[0].select(1, mid_y)),
                  x + static_cast<int>(2 * j + 1) * kTile, y + kCaption);
      if (shown > 1)
        sheet.text(x + static_cast<int>(2 * j) * kTile + 4, y + kCaption + 4,
                   "ch " + std::to_string(ch), {255, 255, 0});
    }
    const std::string caption = preview_caption(c.meta, o.channel);
    const size_t nl = caption.find('\n');
    sheet.text(x + 4, y + 3, caption.substr(0, nl) + "  axial | coronal", {30, 30, 30});
    sheet.text(x + 4, y + 14, caption.substr(nl + 1), {30, 30, 30});
  }
  write_png(o.out, sheet);
  return static_cast<int64_t>(crops.size());
}

}  // namespace volshard
