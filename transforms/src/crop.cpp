// Crops: RandCropByPosNegLabel (and its label scan), RandSpatialCrop.

#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checks.h"
#include "pad.h"
#include "volshard/core/error.h"
#include "volshard/core/log.h"

namespace volshard {

using detail::spatial_shape;

void PosNegCropOptions::validate() const {
  if (!(pos >= 0.0) || !(neg >= 0.0) || !(pos + neg > 0.0)) {
    throw std::invalid_argument("RandCropByPosNegLabel: pos=" + std::to_string(pos) + " and neg=" +
                                std::to_string(neg) + " must be >= 0 with pos + neg > 0");
  }
  if (num_samples < 1) {
    throw std::invalid_argument(
        "RandCropByPosNegLabel: num_samples=" + std::to_string(num_samples) + " must be >= 1");
  }
}

int64_t LabelIndices::background_count() const {
  return voxels > 0 ? voxels - static_cast<int64_t>(foreground.size())
                    : static_cast<int64_t>(background.size());
}

int32_t LabelIndices::background_at(int64_t k) const {
  if (k < 0 || k >= background_count()) {
    throw std::out_of_range("LabelIndices: background voxel " + std::to_string(k) + " of " +
                            std::to_string(background_count()));
  }
  if (voxels == 0) return background[static_cast<size_t>(k)];
  // foreground[j] - j background voxels come before foreground[j], a count
  // that never decreases with j; the k-th background voxel is k plus the
  // number j of foreground voxels with at most k background voxels before.
  int64_t j = 0, hi = static_cast<int64_t>(foreground.size());
  while (j < hi) {
    const int64_t mid = j + (hi - j) / 2;
    if (foreground[static_cast<size_t>(mid)] - mid <= k) {
      j = mid + 1;
    } else {
      hi = mid;
    }
  }
  return static_cast<int32_t>(k + j);
}

namespace {

#if defined(__SSE2__)
// Bit i set when voxel i of the 16 at p is zero (NaN is not zero: foreground,
// as MONAI's `!= 0`).
inline int zero_mask16(const float* p) {
  const __m128 zero = _mm_setzero_ps();
  int m = 0;
  for (int q = 0; q < 4; ++q)
    m |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(p + 4 * q), zero)) << (4 * q);
  return m;
}
inline int zero_mask16(const uint8_t* p) {
  return _mm_movemask_epi8(
      _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_setzero_si128()));
}
#endif

inline int popcount16(unsigned x) {  // no popcnt instruction in the x86-64 baseline
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0F0Fu;
  return static_cast<int>((x + (x >> 8)) & 0x1Fu);
}

// The foreground of one contiguous label channel, counted first so the list
// is allocated once. Labels come in runs, so 16 voxels at a time are usually
// all background (skipped) or all foreground (16 consecutive indices).
template <class T>
std::vector<int32_t> foreground_of(const T* label, int64_t voxels) {
  int64_t count = 0, v = 0;
#if defined(__SSE2__)
  for (; v + 16 <= voxels; v += 16)
    count += 16 - popcount16(static_cast<unsigned>(zero_mask16(label + v)));
#endif
  for (; v < voxels; ++v) count += label[v] != T(0) ? 1 : 0;
  std::vector<int32_t> fg(static_cast<size_t>(count));
  int32_t* out = fg.data();
  v = 0;
#if defined(__SSE2__)
  const __m128i step = _mm_set_epi32(3, 2, 1, 0);
  for (; v + 16 <= voxels; v += 16) {
    const int zero = zero_mask16(label + v);
    if (zero == 0xFFFF) continue;
    if (zero == 0) {
      for (int q = 0; q < 4; ++q) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * q),
                         _mm_add_epi32(_mm_set1_epi32(static_cast<int32_t>(v + 4 * q)), step));
      }
      out += 16;
      continue;
    }
    for (int k = 0; k < 16; ++k) {
      if (!(zero & (1 << k))) *out++ = static_cast<int32_t>(v + k);
    }
  }
#endif
  for (; v < voxels; ++v) {
    if (label[v] != T(0)) *out++ = static_cast<int32_t>(v);
  }
  return fg;
}

}  // namespace

LabelIndices label_indices(const at::Tensor& label, const at::Tensor* image,
                           double image_threshold) {
  (void)spatial_shape(label);
  if (!label.is_cpu() || (image != nullptr && !image->is_cpu())) {  // a sample on a GPU
    const at::Tensor host_image = image != nullptr ? image->cpu() : at::Tensor();
    return label_indices(label.cpu(), image != nullptr ? &host_image : nullptr, image_threshold);
  }
  // One-hot labels: channel 0 is the background and does not count.
  const at::Tensor channels_used =
      label.size(0) > 1 ? label.narrow(0, 1, label.size(0) - 1) : label;
  const int64_t channels = channels_used.size(0);
  const int64_t voxels = label.size(1) * label.size(2) * label.size(3);
  if (voxels > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument("label_indices: " + std::to_string(voxels) +
                                " voxels exceed int32 indices");
  }
  LabelIndices out;
  if (channels == 1 &&
      image == nullptr) {  // the common case: one label channel, background = the rest
    out.voxels = voxels;
    if (channels_used.scalar_type() == at::kByte) {
      const at::Tensor l = channels_used.contiguous();
      out.foreground = foreground_of(l.data_ptr<uint8_t>(), voxels);
    } else {
      const at::Tensor l = channels_used.to(at::kFloat).contiguous();
      out.foreground = foreground_of(l.data_ptr<float>(), voxels);
    }
    return out;
  }
  const at::Tensor l = channels_used.to(at::kFloat).contiguous();
  const float* lp = l.data_ptr<float>();
  at::Tensor img;
  if (image != nullptr) img = image->to(at::kFloat).contiguous();
  const float* ip = image != nullptr ? img.data_ptr<float>() : nullptr;
  const int64_t image_channels = image != nullptr ? img.size(0) : 0;
  if (ip == nullptr) out.voxels = voxels;
  for (int64_t v = 0; v < voxels; ++v) {
    bool fg = false;
    for (int64_t c = 0; c < channels && !fg; ++c) fg = lp[c * voxels + v] != 0.0f;
    if (fg) {
      out.foreground.push_back(static_cast<int32_t>(v));
      continue;
    }
    bool bg = false;
    for (int64_t c = 0; c < image_channels && !bg; ++c) bg = ip[c * voxels + v] > image_threshold;
    if (bg) out.background.push_back(static_cast<int32_t>(v));
  }
  return out;
}

std::array<int64_t, 3> crop_size(const std::array<int64_t, 3>& shape,
                                 const PosNegCropOptions& options) {
  std::array<int64_t, 3> size{};
  bool larger = false;
  for (size_t a = 0; a < 3; ++a) {
    size[a] = options.spatial_size[a] <= 0 ? shape[a] : options.spatial_size[a];
    if (size[a] > shape[a]) {
      larger = true;
      if (options.allow_smaller) size[a] = shape[a];
    }
  }
  if (larger && !options.allow_smaller) {
    throw std::invalid_argument(
        "RandCropByPosNegLabel: the crop ROI " + shape_text(options.spatial_size, true) +
        " is larger than the image " + shape_text(shape, true) +
        " after the prefix: --allow-smaller (allow_smaller in Python and configs) shrinks it, "
        "--spatial-pad pads the volumes to it");
  }
  return size;
}

int64_t clamp_crop_centre(int64_t centre, int64_t size, int64_t length) {
  const int64_t lo = size / 2;
  // MONAI: uint16(L + 1 - s / 2) with float division, truncated.
  auto hi =
      static_cast<int64_t>(static_cast<double>(length) + 1.0 - static_cast<double>(size) / 2.0);
  if (lo == hi) ++hi;
  return std::min(std::max(centre, lo), hi - 1);
}

std::vector<CropParams> sample_pos_neg_crops(const std::array<int64_t, 3>& shape,
                                             const LabelIndices& indices,
                                             const PosNegCropOptions& options, StreamRng& rng,
                                             std::atomic<bool>* warned) {
  options.validate();
  const std::array<int64_t, 3> size = crop_size(shape, options);
  if (indices.empty())
    throw std::invalid_argument("RandCropByPosNegLabel: No sampling location available.");
  double pos_ratio = options.pos / (options.pos + options.neg);
  const int64_t background = indices.background_count();
  if (indices.foreground.empty() || background == 0) {
    pos_ratio = indices.foreground.empty() ? 0.0 : 1.0;
    if (warned == nullptr || !warned->exchange(true)) {
      warn("RandCropByPosNegLabel: " + std::to_string(indices.foreground.size()) +
           " foreground and " + std::to_string(background) +
           " background voxels; unable to generate class balanced "
           "samples, setting pos_ratio to " +
           (pos_ratio == 0.0 ? "0" : "1"));
    }
  }
  std::vector<CropParams> crops;
  for (int64_t k = 0; k < options.num_samples; ++k) {
    CropParams crop;
    crop.size = size;
    crop.foreground = rng.uniform_double() < pos_ratio;
    const int64_t flat =
        crop.foreground
            ? indices.foreground[static_cast<size_t>(rng.below(indices.foreground.size()))]
            : indices.background_at(
                  static_cast<int64_t>(rng.below(static_cast<uint64_t>(background))));
    // C order: the last spatial axis varies fastest.
    const std::array<int64_t, 3> voxel{flat / (shape[1] * shape[2]), (flat / shape[2]) % shape[1],
                                       flat % shape[2]};
    crop.voxel = voxel;
    for (size_t a = 0; a < 3; ++a) {
      crop.centre[a] = clamp_crop_centre(voxel[a], size[a], shape[a]);
      crop.start[a] = crop.centre[a] - size[a] / 2;
    }
    crops.push_back(crop);
  }
  return crops;
}

Sample crop_lazy(const Sample& sample, const CropParams& crop, int64_t patch_index) {
  const auto shape = view_shape(sample);
  Sample out;
  out.image = sample.image;
  out.label = sample.label;
  out.indices = sample.indices;
  out.view = view_of(sample).cropped(crop.start, crop.size);
  out.meta = sample.meta;
  out.meta.patch_index = patch_index;
  out.meta.cropped = true;
  out.meta.foreground_centre = crop.foreground;
  out.meta.crop_centre = crop.centre;
  out.meta.crop_start = crop.start;
  out.meta.source_shape = shape;
  return out;
}

Sample apply_crop(const Sample& sample, const CropParams& crop, int64_t patch_index) {
  return materialize(crop_lazy(sample, crop, patch_index));
}

CropParams sample_spatial_crop(const std::array<int64_t, 3>& shape,
                               const std::array<int64_t, 3>& size, StreamRng& rng) {
  CropParams crop;
  crop.size = size;
  for (size_t a = 0; a < 3; ++a) {
    if (size[a] < 1 || size[a] > shape[a]) {
      throw std::invalid_argument("RandSpatialCrop: size " + shape_text(size, true) +
                                  " must fit the image " + shape_text(shape, true));
    }
    crop.start[a] = rng.uniform_int(0, shape[a] - size[a]);
    crop.centre[a] = crop.start[a] + size[a] / 2;
  }
  crop.voxel = crop.centre;
  return crop;
}

namespace {

// The first and last index of voxels > 0 (any channel) along each axis of a
// float32 source, any strides, scanning each row from both ends; false when
// there is none. NaN is not > 0, as in (source > 0).
bool float_foreground_bounds(const at::Tensor& source, std::array<int64_t, 3>& first,
                             std::array<int64_t, 3>& last) {
  const float* p = source.data_ptr<float>();
  const int64_t c_n = source.size(0), x_n = source.size(1), y_n = source.size(2),
                z_n = source.size(3);
  const int64_t sc = source.stride(0), sx = source.stride(1), sy = source.stride(2),
                sz = source.stride(3);
  first = {x_n, y_n, z_n};
  last = {-1, -1, -1};
  for (int64_t c = 0; c < c_n; ++c) {
    for (int64_t x = 0; x < x_n; ++x) {
      for (int64_t y = 0; y < y_n; ++y) {
        const float* row = p + c * sc + x * sx + y * sy;
        int64_t lo = 0;
        while (lo < z_n && !(row[lo * sz] > 0.0f)) ++lo;
        if (lo == z_n) continue;
        int64_t hi = z_n - 1;
        while (!(row[hi * sz] > 0.0f)) --hi;
        first = {std::min(first[0], x), std::min(first[1], y), std::min(first[2], lo)};
        last = {std::max(last[0], x), std::max(last[1], y), std::max(last[2], hi)};
      }
    }
  }
  return last[0] >= 0;
}

}  // namespace

VoxelBox foreground_box(const at::Tensor& source, int64_t margin) {
  const std::array<int64_t, 3> shape = spatial_shape(source);
  if (margin < 0)
    throw std::invalid_argument("CropForeground: margin=" + std::to_string(margin) +
                                " must be >= 0");
  VoxelBox box;
  if (source.is_cpu() && source.scalar_type() == at::kFloat) {  // one pass, no mask
    std::array<int64_t, 3> first{}, last{};
    if (!float_foreground_bounds(source, first, last)) return VoxelBox{};
    for (size_t a = 0; a < 3; ++a) {
      box.start[a] = std::max<int64_t>(first[a] - margin, 0);
      box.end[a] = std::min<int64_t>(last[a] + margin + 1, shape[a]);
    }
    return box;
  }
  const at::Tensor mask = (source > 0).any(0);  // X x Y x Z
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> others;
    for (int64_t d = 0; d < 3; ++d)
      if (d != axis) others.push_back(d);
    const at::Tensor along = mask.any(others[1]).any(others[0]);  // length shape[axis]
    const at::Tensor hits = along.nonzero();
    if (hits.numel() == 0) return VoxelBox{};  // no foreground: MONAI's all-zero box
    const int64_t first = hits[0][0].item<int64_t>(), last = hits[-1][0].item<int64_t>();
    box.start[static_cast<size_t>(axis)] = std::max<int64_t>(first - margin, 0);
    box.end[static_cast<size_t>(axis)] =
        std::min<int64_t>(last + margin + 1, shape[static_cast<size_t>(axis)]);
  }
  return box;
}

SpatialImage crop_box(const SpatialImage& image, const VoxelBox& box) {
  const std::array<int64_t, 3> shape = spatial_shape(image.data);
  for (size_t a = 0; a < 3; ++a) {
    if (box.start[a] < 0 || box.end[a] < box.start[a] || box.end[a] > shape[a])
      throw std::out_of_range("crop_box: [" + shape_text(box.start, true) + ", " +
                              shape_text(box.end, true) + ") is not inside " +
                              shape_text(shape, true));
  }
  SpatialImage out;
  out.data = image.data.slice(1, box.start[0], box.end[0])
                 .slice(2, box.start[1], box.end[1])
                 .slice(3, box.start[2], box.end[2])
                 .contiguous();
  out.affine = image.affine;
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 3; ++c)
      out.affine[r][3] += image.affine[r][c] * static_cast<double>(box.start[c]);
  return out;
}

namespace detail {

at::Tensor pad_spatial(const at::Tensor& x, const std::array<int64_t, 3>& target, PadAt at,
                       std::array<int64_t, 3>* before) {
  const int64_t first_axis = x.dim() - 3;
  std::vector<int64_t> widths;  // last axis first, as at::constant_pad_nd wants
  bool any = false;
  for (size_t a = 3; a-- > 0;) {
    const int64_t width =
        std::max<int64_t>(target[a] - x.size(first_axis + static_cast<int64_t>(a)), 0);
    const int64_t first = at == PadAt::kSymmetric ? width / 2 : 0;
    if (before) (*before)[a] = first;
    widths.push_back(first);
    widths.push_back(width - first);
    any = any || width > 0;
  }
  return any ? at::constant_pad_nd(x, widths, 0.0) : x;
}

}  // namespace detail

SpatialImage spatial_pad(const SpatialImage& image, const std::array<int64_t, 3>& size) {
  (void)spatial_shape(image.data);  // C x X x Y x Z
  std::array<int64_t, 3> before{};
  SpatialImage out{detail::pad_spatial(image.data, size, detail::PadAt::kSymmetric, &before),
                   image.affine};
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 3; ++c)
      out.affine[r][3] -= image.affine[r][c] * static_cast<double>(before[c]);
  return out;
}

}  // namespace volshard
