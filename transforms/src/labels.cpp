// Label maps to channels: the BraTS regions, one-hot.

#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "checks.h"
#include "volshard/core/error.h"

namespace volshard {

using detail::spatial_shape;

namespace {

void check_one_channel(const at::Tensor& label, const char* what) {
  const auto shape = spatial_shape(label);
  if (label.size(0) != 1) {
    throw std::invalid_argument(
        std::string(what) + ": the label has C=" + std::to_string(label.size(0)) + " channels of " +
        shape_text(shape, true) + "; expected C=1, a map of label values");
  }
}

// One pass over the label: each value's three memberships at once. Values are
// compared in the label's own type (double for types other than uint8/float),
// as MONAI's `img == 4`.
template <class T, class Out>
void brats_pass(const T* l, Out* out, int64_t n, BratsLabels scheme) {
  const bool brats = scheme == BratsLabels::kBrats;
  const T core_a = brats ? T(1) : T(2), core_b = brats ? T(4) : T(3);  // TC = a | b
  const T rest = brats ? T(2) : T(1);                                  // WT = TC | rest
  const T enhancing = brats ? T(4) : T(3);                             // ET
  for (int64_t i = 0; i < n; ++i) {
    const T v = l[i];
    const bool tc = v == core_a || v == core_b;
    out[i] = tc ? Out(1) : Out(0);
    out[n + i] = tc || v == rest ? Out(1) : Out(0);
    out[2 * n + i] = v == enhancing ? Out(1) : Out(0);
  }
}

// The voxel (x, y, z) of flat C-order index i.
std::string voxel_text(int64_t i, const std::array<int64_t, 3>& shape) {
  const std::array<int64_t, 3> v{i / (shape[1] * shape[2]), (i / shape[2]) % shape[1],
                                 i % shape[2]};
  return shape_text(v, true);
}

template <class T>
void one_hot_pass(const T* l, float* out, int64_t n, int64_t num_classes,
                  const std::array<int64_t, 3>& shape) {
  const auto classes = static_cast<double>(num_classes);
  for (int64_t i = 0; i < n; ++i) {
    const auto v = static_cast<double>(l[i]);
    if (!(v >= 0.0 && v < classes && v == std::floor(v))) {  // NaN fails every comparison
      throw std::invalid_argument("one_hot: label value " + value_text(v) + " at voxel " +
                                  voxel_text(i, shape) + " is not an integer in [0, " +
                                  std::to_string(num_classes) + ")");
    }
    out[static_cast<int64_t>(v) * n + i] = 1.0f;
  }
}

}  // namespace

at::Tensor brats_channels(const at::Tensor& label, BratsLabels scheme) {
  check_one_channel(label, "brats_channels");
  const int64_t n = label.numel();
  const bool bytes = label.scalar_type() == at::kByte;
  at::Tensor out =
      at::empty({3, label.size(1), label.size(2), label.size(3)}, bytes ? at::kByte : at::kFloat);
  if (bytes) {
    const at::Tensor l = label.contiguous();
    brats_pass(l.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(), n, scheme);
  } else if (label.scalar_type() == at::kFloat) {
    const at::Tensor l = label.contiguous();
    brats_pass(l.data_ptr<float>(), out.data_ptr<float>(), n, scheme);
  } else {
    const at::Tensor l = label.to(at::kDouble).contiguous();
    brats_pass(l.data_ptr<double>(), out.data_ptr<float>(), n, scheme);
  }
  return out;
}

at::Tensor one_hot(const at::Tensor& label, int64_t num_classes) {
  check_one_channel(label, "one_hot");
  if (num_classes < 1) {
    throw std::invalid_argument("one_hot: num_classes=" + std::to_string(num_classes) +
                                " must be >= 1");
  }
  const auto shape = spatial_shape(label);
  const int64_t n = label.numel();
  at::Tensor out = at::zeros({num_classes, shape[0], shape[1], shape[2]}, at::kFloat);
  if (label.scalar_type() == at::kByte) {
    const at::Tensor l = label.contiguous();
    one_hot_pass(l.data_ptr<uint8_t>(), out.data_ptr<float>(), n, num_classes, shape);
  } else if (label.scalar_type() == at::kFloat) {
    const at::Tensor l = label.contiguous();
    one_hot_pass(l.data_ptr<float>(), out.data_ptr<float>(), n, num_classes, shape);
  } else {
    const at::Tensor l = label.to(at::kDouble).contiguous();
    one_hot_pass(l.data_ptr<double>(), out.data_ptr<float>(), n, num_classes, shape);
  }
  return out;
}

}  // namespace volshard
