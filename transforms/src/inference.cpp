#include "volshard/transforms/inference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "pad.h"
#include "volshard/core/error.h"

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
  for (const double s : sigma_scale)
    if (!(s > 0.0 && s <= kMaxSigmaScale))
      throw std::invalid_argument("sliding window: sigma_scale=" + value_text(s) +
                                  " must be in (0, " + value_text(kMaxSigmaScale) + "]");
}

at::Tensor importance_map(const std::array<int64_t, 3>& roi, BlendMode blend,
                          const std::array<double, 3>& sigma_scale) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor map;
  if (blend == BlendMode::kConstant) {
    map = at::ones({roi[0], roi[1], roi[2]}, f32);
  } else {
    // compute_importance_map's ops, in its order and dtypes: each axis's
    // Gaussian in float32 (the scalar -2 sigma^2 in double, as Python's),
    // then the running product times the next axis.
    for (size_t i = 0; i < 3; ++i) {
      const double n = static_cast<double>(roi[i]);
      const double sigma = n * sigma_scale[i];
      const at::Tensor x = at::arange(-(n - 1) / 2.0, (n - 1) / 2.0 + 1, 1.0, f32);
      const at::Tensor g = at::exp(x.pow(2) / (-2 * (sigma * sigma)));
      map = i == 0 ? g : map.unsqueeze(-1) * (i == 1 ? g.view({1, -1}) : g.view({1, 1, -1}));
    }
  }
  const double floor = std::max(map.min().item<double>(), 1e-3);
  return map.clamp_min_(floor);
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
  const at::Tensor x = detail::pad_spatial(image, padded, detail::PadAt::kSymmetric, &before);
  std::array<std::vector<int64_t>, 3> starts;
  for (size_t a = 0; a < 3; ++a)
    starts[a] = window_starts(padded[a], options.roi[a], options.overlap);
  std::vector<std::array<int64_t, 3>> windows;
  for (int64_t i : starts[0])
    for (int64_t j : starts[1])
      for (int64_t k : starts[2]) windows.push_back({i, j, k});

  at::Tensor sum, count;
  const at::Tensor weight = importance_map(options.roi, options.blend, options.sigma_scale)
                                .view({1, 1, options.roi[0], options.roi[1], options.roi[2]});
  at::Tensor window_weight;  // the map on the output's device and dtype
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
      window_weight = weight.to(out.options());
    }
    // MONAI multiplies each window's output by the map (constant: ones, which
    // changes no value) and adds the map to the count.
    const at::Tensor weighted = options.blend == BlendMode::kConstant ? out : out * window_weight;
    for (size_t v = w; v < end; ++v) {
      const auto& s = windows[v];
      auto region = [&](const at::Tensor& t) {
        return t.narrow(2, s[0], options.roi[0])
            .narrow(3, s[1], options.roi[1])
            .narrow(4, s[2], options.roi[2]);
      };
      region(sum).add_(weighted.narrow(0, static_cast<int64_t>(v - w), 1));
      if (options.blend == BlendMode::kConstant)
        region(count).add_(1.0);
      else
        region(count).add_(window_weight);
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
  const at::Tensor out = predict(detail::pad_spatial(image, target, detail::PadAt::kEnd));
  return out.narrow(2, 0, image.size(2))
      .narrow(3, 0, image.size(3))
      .narrow(4, 0, image.size(4))
      .contiguous();
}

Predictor mirrored(Predictor predict, const std::vector<int64_t>& axes) {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] > 2)
      throw std::invalid_argument("test-time mirroring: axis " + std::to_string(axes[i]) +
                                  " must be 0 (X), 1 (Y) or 2 (Z)");
    for (size_t j = 0; j < i; ++j)
      if (axes[j] == axes[i])
        throw std::invalid_argument("test-time mirroring: axis " + std::to_string(axes[i]) +
                                    " is named twice");
  }
  if (axes.empty()) return predict;
  // itertools.combinations(axes, k) for k = 1, 2, 3: subsets in lexicographic
  // order of their positions in `axes`.
  std::vector<std::vector<int64_t>> subsets;
  const size_t n = axes.size();
  for (size_t k = 1; k <= n; ++k) {
    std::vector<size_t> at(k);
    for (size_t i = 0; i < k; ++i) at[i] = i;
    while (true) {
      std::vector<int64_t> dims;
      for (const size_t i : at) dims.push_back(axes[i] + 2);
      subsets.push_back(dims);
      size_t i = k;
      while (i > 0 && at[i - 1] == n - k + i - 1) --i;
      if (i == 0) break;
      ++at[i - 1];
      for (size_t j = i; j < k; ++j) at[j] = at[j - 1] + 1;
    }
  }
  return [predict = std::move(predict), subsets](const at::Tensor& x) {
    // Out of place: the predictor's output may be its input (an identity).
    at::Tensor sum = predict(x);
    for (const std::vector<int64_t>& dims : subsets)
      sum = sum + at::flip(predict(at::flip(x, dims)), dims);
    return sum / static_cast<double>(subsets.size() + 1);
  };
}

at::Tensor largest_component(const at::Tensor& mask_in) {
  if (mask_in.dim() != 3)
    throw std::invalid_argument("largest_component: the mask must be X x Y x Z, got " +
                                std::to_string(mask_in.dim()) + " dimensions");
  const at::Tensor mask = mask_in.to(at::kCPU).to(at::kBool).contiguous();
  const int64_t nx = mask.size(0), ny = mask.size(1), nz = mask.size(2);
  const int64_t n = nx * ny * nz;
  const bool* m = mask.data_ptr<bool>();
  // Components by a breadth-first fill over the 26 neighbours, numbered in
  // the C order of their first voxel; the largest, first on equal sizes.
  std::vector<int32_t> component(static_cast<size_t>(n), -1);
  std::vector<int64_t> queue;
  int32_t count = 0, best = -1;
  int64_t best_size = 0;
  for (int64_t start = 0; start < n; ++start) {
    if (!m[start] || component[static_cast<size_t>(start)] >= 0) continue;
    const int32_t id = count++;
    component[static_cast<size_t>(start)] = id;
    queue.assign(1, start);
    for (size_t head = 0; head < queue.size(); ++head) {
      const int64_t v = queue[head];
      const int64_t x = v / (ny * nz), y = v / nz % ny, z = v % nz;
      for (int64_t dx = -1; dx <= 1; ++dx)
        for (int64_t dy = -1; dy <= 1; ++dy)
          for (int64_t dz = -1; dz <= 1; ++dz) {
            const int64_t a = x + dx, b = y + dy, c = z + dz;
            if (a < 0 || a >= nx || b < 0 || b >= ny || c < 0 || c >= nz) continue;
            const int64_t u = (a * ny + b) * nz + c;
            if (!m[u] || component[static_cast<size_t>(u)] >= 0) continue;
            component[static_cast<size_t>(u)] = id;
            queue.push_back(u);
          }
    }
    const auto size = static_cast<int64_t>(queue.size());
    if (size > best_size) best = id, best_size = size;
  }
  if (count <= 1) return mask.to(mask_in.device());
  at::Tensor out = at::empty({nx, ny, nz}, mask.options());
  bool* o = out.data_ptr<bool>();
  for (int64_t v = 0; v < n; ++v) o[v] = component[static_cast<size_t>(v)] == best;
  return out.to(mask_in.device());
}

at::Tensor keep_largest_components(const at::Tensor& labels) {
  if (labels.dim() != 3)
    throw std::invalid_argument("keep_largest_components: the labels must be X x Y x Z, got " +
                                std::to_string(labels.dim()) + " dimensions");
  at::Tensor out = labels.clone();
  const int64_t top = labels.numel() == 0 ? 0 : labels.max().item<int64_t>();
  for (int64_t c = 1; c <= top; ++c) {
    const at::Tensor mask = labels == c;
    out.masked_fill_(mask.logical_and(largest_component(mask).logical_not()), 0);
  }
  return out;
}

}  // namespace volshard
