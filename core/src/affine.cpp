#include "volshard/core/affine.h"

#include <cstddef>

namespace volshard {

Affine identity_affine() {
  Affine a{};
  for (size_t r = 0; r < 4; ++r) a[r][r] = 1.0;
  return a;
}

Affine multiply(const Affine& a, const Affine& b) {
  Affine c{};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 4; ++j)
      for (size_t k = 0; k < 4; ++k) c[i][j] += a[i][k] * b[k][j];
  return c;
}

}  // namespace volshard
