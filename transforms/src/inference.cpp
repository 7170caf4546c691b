#include "volshard/transforms/inference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace volshard {

void SlidingWindowOptions::validate() const {
  for (int a = 0; a < 3; ++a)
    if (roi[static_cast<size_t>(a)] < 1)
      throw std::invalid_argument("sliding window: roi[" + std::to_string(a) + "]=" +
                                  std::to_string(roi[static_cast<size_t>(a)]) + " must be >= 1");
  if (!(overlap >= 0.0 && overlap < 1.0))
    throw std::invalid_argument("sliding window: overlap=" + std::to_string(overlap) +
                                " must be in [0, 1)");
  if (sw_batch_size < 1)
    throw std::invalid_argument("sliding window: sw_batch_size=" + std::to_string(sw_batch_size) +
                                " must be >= 1");
}

std::vector<int64_t> window_starts(int64_t length, int64_t roi, double overlap) {
  if (length <= roi) return {0};
  const int64_t interval = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(roi) * (1.0 - overlap))));
  const int64_t count = (length - roi + interval - 1) / interval + 1;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < count; ++i) starts.push_back(std::min(i * interval, length - roi));
  return starts;
}

namespace {

// Zero-pads the spatial axes up to `target`: at their end, or (symmetric)
// half of it before, as MONAI's sliding_window_inference. `before` gets the
// zeros put before each axis.
at::Tensor pad_to(const at::Tensor& x, const std::array<int64_t, 3>& target, bool symmetric,
                  std::array<int64_t, 3>* before = nullptr) {
  std::vector<int64_t> pad;  // last axis first, as at::constant_pad_nd wants
  bool any = false;
  for (int a = 2; a >= 0; --a) {
    const int64_t extra = std::max<int64_t>(0, target[static_cast<size_t>(a)] - x.size(2 + a));
    const int64_t first = symmetric ? extra / 2 : 0;
    if (before) (*before)[static_cast<size_t>(a)] = first;
    pad.push_back(first);
    pad.push_back(extra - first);
    any = any || extra > 0;
  }
  return any ? at::constant_pad_nd(x, pad, 0.0) : x;
}

void check_image(const at::Tensor& image) {
  if (image.dim() != 5 || image.size(0) != 1)
    throw std::invalid_argument("inference: image must be 1 x C x X x Y x Z, got " +
                                std::to_string(image.dim()) + " dimensions");
}

}  // namespace

at::Tensor sliding_window_inference(const at::Tensor& image, const SlidingWindowOptions& options,
                                    const Predictor& predict) {
  options.validate();
  check_image(image);
  const std::array<int64_t, 3> size{image.size(2), image.size(3), image.size(4)};
  std::array<int64_t, 3> padded{};
  for (size_t a = 0; a < 3; ++a) padded[a] = std::max(size[a], options.roi[a]);
  std::array<int64_t, 3> before{};
  const at::Tensor x = pad_to(image, padded, /*symmetric=*/true, &before);
  std::array<std::vector<int64_t>, 3> starts;
  for (size_t a = 0; a < 3; ++a)
    starts[a] = window_starts(padded[a], options.roi[a], options.overlap);
  std::vector<std::array<int64_t, 3>> windows;
  for (int64_t i : starts[0])
    for (int64_t j : starts[1])
      for (int64_t k : starts[2]) windows.push_back({i, j, k});

  at::Tensor sum, count;
  for (size_t w = 0; w < windows.size(); w += static_cast<size_t>(options.sw_batch_size)) {
    const size_t end = std::min(windows.size(), w + static_cast<size_t>(options.sw_batch_size));
    std::vector<at::Tensor> patches;
    for (size_t v = w; v < end; ++v) {
      const auto& s = windows[v];
      patches.push_back(x.narrow(2, s[0], options.roi[0])
                            .narrow(3, s[1], options.roi[1])
                            .narrow(4, s[2], options.roi[2]));
    }
    const at::Tensor out = predict(at::cat(patches, 0));
    if (!sum.defined()) {
      sum = at::zeros({1, out.size(1), padded[0], padded[1], padded[2]}, out.options());
      count = at::zeros({1, 1, padded[0], padded[1], padded[2]}, out.options());
    }
    for (size_t v = w; v < end; ++v) {
      const auto& s = windows[v];
      auto region = [&](const at::Tensor& t) {
        return t.narrow(2, s[0], options.roi[0])
            .narrow(3, s[1], options.roi[1])
            .narrow(4, s[2], options.roi[2]);
      };
      region(sum).add_(out.narrow(0, static_cast<int64_t>(v - w), 1));
      region(count).add_(1.0);
    }
  }
  return (sum / count)
      .narrow(2, before[0], size[0])
      .narrow(3, before[1], size[1])
      .narrow(4, before[2], size[2])
      .contiguous();
}

at::Tensor whole_volume_inference(const at::Tensor& image, int64_t multiple,
                                  const Predictor& predict) {
  check_image(image);
  if (multiple < 1)
    throw std::invalid_argument("inference: multiple=" + std::to_string(multiple) +
                                " must be >= 1");
  std::array<int64_t, 3> target{};
  for (size_t a = 0; a < 3; ++a)
    target[a] = (image.size(2 + static_cast<int64_t>(a)) + multiple - 1) / multiple * multiple;
  const at::Tensor out = predict(pad_to(image, target, /*symmetric=*/false));
  return out.narrow(2, 0, image.size(2))
      .narrow(3, 0, image.size(3))
      .narrow(4, 0, image.size(4))
      .contiguous();
}

}  // namespace volshard
