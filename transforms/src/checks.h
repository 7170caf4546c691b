#pragma once
// Argument checks the transform families share (private to transforms/).

#include <ATen/core/Tensor.h>

#include "volshard/core/error.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace volshard::detail {

/// The X, Y, Z sizes of a C x X x Y x Z tensor; throws std::invalid_argument otherwise.
inline std::array<int64_t, 3> spatial_shape(const at::Tensor& t) {
  if (t.dim() != 4) {
    throw std::invalid_argument("expected a C x X x Y x Z tensor, got " + std::to_string(t.dim()) +
                                " dims");
  }
  return {t.size(1), t.size(2), t.size(3)};
}

inline void check_probability(const char* what, double p) {
  if (!(p >= 0.0 && p <= 1.0))
    throw std::invalid_argument(std::string(what) + "=" + value_text(p) + " must be in [0, 1]");
}

inline void check_spatial_axis(const char* what, int64_t axis) {
  if (axis < 0 || axis > 2)
    throw std::invalid_argument(std::string(what) + "=" + std::to_string(axis) +
                                " must be in [0, 2]");
}

}  // namespace volshard::detail
