// Pending spatial views (crops, quarter turns, flips) and the one pass that
// materialises them: read the source through the composed map and write the
// output once, converting the element type on the way when the destination
// asks for it (a uint8 label into a float32 batch).
#include <ATen/ATen.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define VOLSHARD_SSE2 1
#endif

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "volshard/transforms/transforms.h"

namespace volshard {

SpatialMap SpatialMap::identity(const std::array<int64_t, 3>& shape) {
  SpatialMap m;
  m.size = shape;
  return m;
}

bool SpatialMap::is_identity(const std::array<int64_t, 3>& source_shape) const {
  return origin == std::array<int64_t, 3>{} && size == source_shape && axis == std::array<int64_t, 3>{0, 1, 2} &&
         sign == std::array<int64_t, 3>{1, 1, 1};
}

SpatialMap SpatialMap::cropped(const std::array<int64_t, 3>& start, const std::array<int64_t, 3>& box) const {
  SpatialMap m = *this;
  for (size_t d = 0; d < 3; ++d) {
    if (start[d] < 0 || box[d] < 0 || start[d] + box[d] > size[d]) {
      throw std::out_of_range("SpatialMap: crop [" + std::to_string(start[d]) + ", " +
                              std::to_string(start[d] + box[d]) + ") of axis " + std::to_string(d) +
                              " outside [0, " + std::to_string(size[d]) + ")");
    }
    m.origin[static_cast<size_t>(axis[d])] += sign[d] * start[d];
  }
  m.size = box;
  return m;
}

SpatialMap SpatialMap::flipped(int64_t d) const {
  SpatialMap m = *this;
  const auto ud = static_cast<size_t>(d);
  m.origin[static_cast<size_t>(axis[ud])] += sign[ud] * (size[ud] - 1);
  m.sign[ud] = -sign[ud];
  return m;
}

SpatialMap SpatialMap::rotated90(int64_t k, int64_t p, int64_t q) const {
  // torch.rot90: k = 1 is flip(q) then transpose(p, q); k = 2 flips both;
  // k = 3 is flip(p) then transpose(p, q).
  const auto transposed = [p, q](SpatialMap m) {
    const auto up = static_cast<size_t>(p), uq = static_cast<size_t>(q);
    std::swap(m.axis[up], m.axis[uq]);
    std::swap(m.sign[up], m.sign[uq]);
    std::swap(m.size[up], m.size[uq]);
    return m;
  };
  switch (((k % 4) + 4) % 4) {
    case 1:
      return transposed(flipped(q));
    case 2:
      return flipped(p).flipped(q);
    case 3:
      return transposed(flipped(p));
    default:
      return *this;
  }
}

namespace {

// A view of one channel in elements: out[i0][i1][i2] = in[i0*s0 + i1*s1 + i2*s2].
struct Strides {
  std::array<int64_t, 3> size{};
  std::array<int64_t, 3> stride{};
};

template <class In, class Out>
inline void copy_row(const In* src, int64_t step, int64_t n, Out* dst) {
  if constexpr (std::is_same_v<In, Out>) {
    if (step == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(Out));
      return;
    }
  }
  int64_t i = 0;
#if VOLSHARD_SSE2
  if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, float>) {
    if (step == -1) {  // a reversed row: four at a time, reversed in a register
      for (; i + 4 <= n; i += 4) {
        const __m128 v = _mm_loadu_ps(src - i - 3);
        _mm_storeu_ps(dst + i, _mm_shuffle_ps(v, v, _MM_SHUFFLE(0, 1, 2, 3)));
      }
    }
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<Out>(src[i * step]);
}

#if VOLSHARD_SSE2
// 4 x 4 float blocks: four strided rows of the source, each four unit-stride
// (or reversed) elements, transposed in registers into four output rows.
inline void transpose_block_4x4(const float* src, int64_t s_row, int64_t s_unit, float* dst, int64_t d_row) {
  __m128 r0, r1, r2, r3;
  if (s_unit == 1) {
    r0 = _mm_loadu_ps(src);
    r1 = _mm_loadu_ps(src + s_row);
    r2 = _mm_loadu_ps(src + 2 * s_row);
    r3 = _mm_loadu_ps(src + 3 * s_row);
  } else {  // reversed: elements src[0], src[-1], src[-2], src[-3]
    const auto rev = [](__m128 v) { return _mm_shuffle_ps(v, v, _MM_SHUFFLE(0, 1, 2, 3)); };
    r0 = rev(_mm_loadu_ps(src - 3));
    r1 = rev(_mm_loadu_ps(src + s_row - 3));
    r2 = rev(_mm_loadu_ps(src + 2 * s_row - 3));
    r3 = rev(_mm_loadu_ps(src + 3 * s_row - 3));
  }
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + d_row, r1);
  _mm_storeu_ps(dst + 2 * d_row, r2);
  _mm_storeu_ps(dst + 3 * d_row, r3);
}
#endif

template <class In, class Out>
void gather_channel(const In* in, const Strides& v, Out* out) {
  const auto [n0, n1, n2] = v.size;
  const auto [s0, s1, s2] = v.stride;
  if (s2 == 1 || s2 == -1 || n2 == 1) {  // output rows are source rows (maybe reversed)
    for (int64_t i0 = 0; i0 < n0; ++i0) {
      for (int64_t i1 = 0; i1 < n1; ++i1) copy_row(in + i0 * s0 + i1 * s1, s2, n2, out + (i0 * n1 + i1) * n2);
    }
    return;
  }
  // The output's rows run across source rows. Whatever the strides, it goes
  // plane by plane: the source rows of one plane are copied into a small
  // contiguous buffer (sequential reads, however far apart the rows are),
  // which is then transposed in cache into the output rows (sequential
  // writes). Walking the source directly instead hits a few cache sets over
  // and over with the power-of-two strides of volumes like 128^3.
  const bool unit0 = s0 == 1 || s0 == -1, unit1 = s1 == 1 || s1 == -1;
  if (unit0 || unit1) {
    const int64_t na = unit0 ? n0 : n1, nb = unit0 ? n1 : n0;  // a: the source's rows, b: the planes
    const int64_t sa = unit0 ? s0 : s1, sb = unit0 ? s1 : s0;
    const int64_t da = unit0 ? n1 * n2 : n2, db = unit0 ? n2 : n1 * n2;  // output strides of a and b
    thread_local std::vector<In> plane_buffer;
    plane_buffer.resize(static_cast<size_t>(na * n2));
    In* plane = plane_buffer.data();  // plane[c * na + a] = source(a, b, c)
    for (int64_t b = 0; b < nb; ++b) {
      const In* in_b = in + b * sb;
      Out* out_b = out + b * db;
      // The rows of a plane may lie far apart (64 KiB in a 128^3 volume):
      // too short for the hardware prefetcher, so ask for a few rows ahead.
      constexpr int64_t kAhead = 8;
      const auto row_bytes = static_cast<int64_t>(na * sizeof(In));
      const auto prefetch_row = [&](int64_t c) {
        const auto* first = reinterpret_cast<const char*>(sa > 0 ? in_b + c * s2 : in_b + c * s2 - (na - 1));
        for (int64_t byte = 0; byte < row_bytes; byte += 64) __builtin_prefetch(first + byte);
        __builtin_prefetch(first + row_bytes - 1);
      };
      for (int64_t c = 0; c < std::min(kAhead, n2); ++c) prefetch_row(c);
      for (int64_t c = 0; c < n2; ++c) {
        if (c + kAhead < n2) prefetch_row(c + kAhead);
        copy_row(in_b + c * s2, sa, na, plane + c * na);
      }
      int64_t a = 0;
#if VOLSHARD_SSE2
      if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, float>) {
        for (; a + 4 <= na; a += 4) {
          int64_t c = 0;
          for (; c + 4 <= n2; c += 4) transpose_block_4x4(plane + c * na + a, na, 1, out_b + a * da + c, da);
          for (; c < n2; ++c) {
            for (int64_t t = a; t < a + 4; ++t) out_b[t * da + c] = plane[c * na + t];
          }
        }
      }
#endif
      for (; a < na; ++a) {
        Out* dst = out_b + a * da;
        for (int64_t c = 0; c < n2; ++c) dst[c] = static_cast<Out>(plane[c * na + a]);
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < n0; ++i0) {  // no unit stride anywhere: element by element
    for (int64_t i1 = 0; i1 < n1; ++i1) {
      Out* dst = out + (i0 * n1 + i1) * n2;
      for (int64_t i2 = 0; i2 < n2; ++i2) dst[i2] = static_cast<Out>(in[i0 * s0 + i1 * s1 + i2 * s2]);
    }
  }
}

std::array<int64_t, 3> spatial_of(const at::Tensor& t) { return {t.size(1), t.size(2), t.size(3)}; }

// The view as plain ATen ops (slice, flip, permute): any dtype, any strides.
at::Tensor aten_view(const at::Tensor& t, const SpatialMap& m) {
  at::Tensor x = t;
  std::vector<int64_t> flips;
  for (size_t d = 0; d < 3; ++d) {
    const int64_t a = m.axis[d];
    const int64_t lo = m.sign[d] > 0 ? m.origin[static_cast<size_t>(a)] : m.origin[static_cast<size_t>(a)] - m.size[d] + 1;
    x = x.slice(1 + a, lo, lo + m.size[d]);
    if (m.sign[d] < 0) flips.push_back(1 + a);
  }
  if (!flips.empty()) x = at::flip(x, flips);
  return x.permute({0, 1 + m.axis[0], 1 + m.axis[1], 1 + m.axis[2]});
}

template <class In, class Out>
void gather_tensor(const at::Tensor& src, const SpatialMap& m, at::Tensor& dst) {
  Strides v;
  v.size = m.size;
  int64_t base = 0;
  for (size_t d = 0; d < 3; ++d) {
    v.stride[d] = m.sign[d] * src.stride(1 + m.axis[d]);
    base += m.origin[d] * src.stride(static_cast<int64_t>(1 + d));
  }
  const In* in = src.data_ptr<In>() + base;
  Out* out = dst.data_ptr<Out>();
  const int64_t out_channel = m.size[0] * m.size[1] * m.size[2];
  for (int64_t c = 0; c < src.size(0); ++c) gather_channel(in + c * src.stride(0), v, out + c * out_channel);
}

void check_map(const at::Tensor& t, const SpatialMap& m, const char* what) {
  const auto shape = spatial_of(t);
  for (size_t d = 0; d < 3; ++d) {
    const auto a = static_cast<size_t>(m.axis[d]);
    const int64_t last = m.origin[a] + m.sign[d] * (m.size[d] - 1);
    if (m.size[d] < 1 || m.origin[a] < 0 || m.origin[a] >= shape[a] || last < 0 || last >= shape[a]) {
      throw std::out_of_range(std::string("materialize: the view of the ") + what + " leaves its spatial shape (" +
                              std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", " +
                              std::to_string(shape[2]) + ") on axis " + std::to_string(a));
    }
  }
}

// dst (contiguous C x view size) = src seen through m.
void gather_into(const at::Tensor& src, const SpatialMap& m, at::Tensor& dst, const char* what) {
  if (src.dim() != 4) {
    throw std::invalid_argument(std::string("materialize: the ") + what + " is not C x X x Y x Z (" +
                                std::to_string(src.dim()) + " dims)");
  }
  check_map(src, m, what);
  const std::vector<int64_t> want{src.size(0), m.size[0], m.size[1], m.size[2]};
  if (dst.sizes() != at::IntArrayRef(want) || !dst.is_contiguous()) {
    throw std::invalid_argument(std::string("materialize: the ") + what + "'s destination is not a contiguous " +
                                std::to_string(want[0]) + " x " + std::to_string(want[1]) + " x " +
                                std::to_string(want[2]) + " x " + std::to_string(want[3]) + " tensor");
  }
  const auto in = src.scalar_type(), out = dst.scalar_type();
  if (in == at::kFloat && out == at::kFloat) {
    gather_tensor<float, float>(src, m, dst);
  } else if (in == at::kByte && out == at::kFloat) {
    gather_tensor<uint8_t, float>(src, m, dst);
  } else if (in == at::kByte && out == at::kByte) {
    gather_tensor<uint8_t, uint8_t>(src, m, dst);
  } else {
    dst.copy_(aten_view(src, m));
  }
}

}  // namespace

Sample materialize(Sample sample) {
  if (!sample.view) return sample;
  const SpatialMap m = *sample.view;
  sample.view.reset();
  if (m.is_identity(spatial_of(sample.image))) return sample;
  const auto fresh = [&m](const at::Tensor& t, const char* what) {
    if (!t.defined()) return t;
    at::Tensor out = at::empty({t.size(0), m.size[0], m.size[1], m.size[2]}, t.options());
    gather_into(t, m, out, what);
    return out;
  };
  sample.image = fresh(sample.image, "image");
  sample.label = fresh(sample.label, "label");
  sample.indices.reset();  // they indexed the source
  return sample;
}

void materialize_into(const Sample& sample, at::Tensor& image, at::Tensor& label) {
  const SpatialMap m = view_of(sample);
  gather_into(sample.image, m, image, "image");
  gather_into(sample.label, m, label, "label");
}

SpatialMap view_of(const Sample& sample) {
  if (sample.view) return *sample.view;
  if (sample.image.dim() != 4) {
    throw std::invalid_argument("expected a C x X x Y x Z tensor, got " + std::to_string(sample.image.dim()) + " dims");
  }
  return SpatialMap::identity(spatial_of(sample.image));
}

std::array<int64_t, 3> view_shape(const Sample& sample) { return view_of(sample).size; }

}  // namespace volshard
