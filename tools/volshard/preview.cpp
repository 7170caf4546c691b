#include "preview.h"

#include <ATen/ATen.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/datasets/load_pair.h"
#include "volshard/datasets/volume.h"
#include "volshard/inspect/png.h"
#include "volshard/sampler/seed_streams.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

constexpr int kTile = 192;  // pixels per slice
constexpr int kCaption = 18;

// A 2D float slice in [0, 1] as a BGR tile with the label's outline in red.
cv::Mat draw_slice(const at::Tensor& image, const at::Tensor& label) {
  const at::Tensor img = image.contiguous();
  const at::Tensor lab = (label > 0.5).to(at::kByte).contiguous();
  cv::Mat gray(static_cast<int>(img.size(0)), static_cast<int>(img.size(1)), CV_32F,
               img.data_ptr<float>());
  cv::Mat mask(static_cast<int>(lab.size(0)), static_cast<int>(lab.size(1)), CV_8U,
               lab.data_ptr<uint8_t>());
  cv::Mat g8, bgr, big, big_mask;
  gray.convertTo(g8, CV_8U, 255.0);
  cv::resize(g8, big, {kTile, kTile}, 0, 0, cv::INTER_NEAREST);
  cv::resize(mask, big_mask, {kTile, kTile}, 0, 0, cv::INTER_NEAREST);
  cv::cvtColor(big, bgr, cv::COLOR_GRAY2BGR);
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(big_mask, contours, cv::RETR_LIST, cv::CHAIN_APPROX_NONE);
  cv::drawContours(bgr, contours, -1, {0, 0, 255}, 2);
  return bgr;
}

}  // namespace

int64_t write_preview(const PreviewOptions& o) {
  if (o.count < 1)
    throw std::invalid_argument("preview: --count=" + std::to_string(o.count) + " must be >= 1");
  const auto pairs = pairs_from_folder(o.data_dir, o.image_glob, o.label_glob);
  const Compose pipeline = tutorial_augmentation({o.crop, o.crop, o.crop}, 4);
  const SeedStreams streams(o.seed);
  std::vector<Sample> crops;
  for (size_t i = 0; i < pairs.size() && static_cast<int64_t>(crops.size()) < o.count; ++i) {
    PairOptions po;
    po.label_indices = false;
    Sample s = load_pair(pairs[i], static_cast<int64_t>(i), po);
    for (auto& c : pipeline(std::move(s), streams.sample_seed(static_cast<int64_t>(i), o.epoch))) {
      if (static_cast<int64_t>(crops.size()) < o.count) crops.push_back(std::move(c));
    }
  }
  const int columns = 4;  // two crops per row, axial + coronal each
  const int rows = static_cast<int>((crops.size() + 1) / 2);
  cv::Mat sheet(rows * (kTile + kCaption), columns * kTile, CV_8UC3, cv::Scalar(255, 255, 255));
  for (size_t k = 0; k < crops.size(); ++k) {
    const Sample& c = crops[k];
    const int64_t mid_z = c.image.size(3) / 2, mid_y = c.image.size(2) / 2;
    const cv::Mat axial = draw_slice(c.image[0].select(2, mid_z), c.label[0].select(2, mid_z));
    const cv::Mat coronal = draw_slice(c.image[0].select(1, mid_y), c.label[0].select(1, mid_y));
    const int x = static_cast<int>(k % 2) * 2 * kTile,
              y = static_cast<int>(k / 2) * (kTile + kCaption);
    axial.copyTo(sheet(cv::Rect(x, y + kCaption, kTile, kTile)));
    coronal.copyTo(sheet(cv::Rect(x + kTile, y + kCaption, kTile, kTile)));
    const std::string caption = "vol " + std::to_string(c.meta.index) + " patch " +
                                std::to_string(c.meta.patch_index) +
                                (c.meta.foreground_centre ? " fg" : " bg") +
                                " rot90 k=" + std::to_string(c.meta.rot90_k) + "  axial | coronal";
    cv::putText(sheet, caption, {x + 4, y + 13}, cv::FONT_HERSHEY_SIMPLEX, 0.42, {30, 30, 30}, 1,
                cv::LINE_AA);
  }
  inspect::write_png(o.out, sheet);
  return static_cast<int64_t>(crops.size());
}

}  // namespace volshard
