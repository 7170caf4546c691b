// Whether the AVX2 loops run: asked of the CPU once, in a file built without
// -mavx2 (simd_avx2.cpp's own code may use AVX2 anywhere).

#include "simd.h"

namespace volshard::detail {

bool avx2_available() {
#if defined(VOLSHARD_AVX2)
  static const bool available = __builtin_cpu_supports("avx2");
  return available;
#else
  return false;
#endif
}

}  // namespace volshard::detail
