#include "volshard/datasets/preview.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/core/png.h"
#include "volshard/core/seed_streams.h"
#include "volshard/datasets/datalist.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/volume.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

constexpr int kTile = 192;  // pixels per slice
constexpr int kCaption = 18;

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

int64_t write_preview(const PreviewOptions& o) {
  if (o.count < 1)
    throw std::invalid_argument("preview: --count=" + std::to_string(o.count) + " must be >= 1");
  const auto pairs = pairs_from_folder(o.data_dir, o.image_glob, o.label_glob);
  const Compose pipeline = feed_augmentation(o.feed);
  const SeedStreams streams(o.seed);
  std::vector<Sample> crops;
  for (size_t i = 0; i < pairs.size() && static_cast<int64_t>(crops.size()) < o.count; ++i) {
    Sample s = load_pair(pairs[i], static_cast<int64_t>(i), feed_prefix());
    for (auto& c : pipeline(std::move(s), streams.sample_seed(static_cast<int64_t>(i), o.epoch))) {
      if (static_cast<int64_t>(crops.size()) < o.count) crops.push_back(std::move(c));
    }
  }
  const int columns = 4;  // two crops per row, axial + coronal each
  const int rows = static_cast<int>((crops.size() + 1) / 2);
  Canvas sheet(columns * kTile, rows * (kTile + kCaption));
  for (size_t k = 0; k < crops.size(); ++k) {
    const Sample& c = crops[k];
    const int64_t mid_z = c.image.size(3) / 2, mid_y = c.image.size(2) / 2;
    const Canvas axial = draw_slice(c.image[0].select(2, mid_z), c.label[0].select(2, mid_z));
    const Canvas coronal = draw_slice(c.image[0].select(1, mid_y), c.label[0].select(1, mid_y));
    const int x = static_cast<int>(k % 2) * 2 * kTile,
              y = static_cast<int>(k / 2) * (kTile + kCaption);
    sheet.paste(axial, x, y + kCaption);
    sheet.paste(coronal, x + kTile, y + kCaption);
    const std::string caption = "vol " + std::to_string(c.meta.index) + " patch " +
                                std::to_string(c.meta.patch_index) +
                                (c.meta.foreground_centre ? " fg" : " bg") +
                                " rot90 k=" + std::to_string(c.meta.rot90_k) + "  axial | coronal";
    sheet.text(x + 4, y + 5, caption, {30, 30, 30});
  }
  write_png(o.out, sheet);
  return static_cast<int64_t>(crops.size());
}

}  // namespace volshard
