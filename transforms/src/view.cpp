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
  return origin == std::array<int64_t, 3>{} && size == source_shape &&
         axis == std::array<int64_t, 3>{0, 1, 2} && sign == std::array<int64_t, 3>{1, 1, 1};
}

SpatialMap SpatialMap::cropped(const std::array<int64_t, 3>& start,
                               const std::array<int64_t, 3>& box) const {
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

// dst[i] = src[i * step], i < n.
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
  if constexpr (std::is_same_v<In, uint8_t> && std::is_same_v<Out, float>) {
    // A uint8 label into a float32 batch: 16 at a time, widened in registers.
    if (step == 1 || step == -1) {
      const __m128i zero = _mm_setzero_si128();
      for (; i + 16 <= n; i += 16) {
        const __m128i bytes =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(step == 1 ? src + i : src - i - 15));
        const __m128i lo = _mm_unpacklo_epi8(bytes, zero), hi = _mm_unpackhi_epi8(bytes, zero);
        __m128 q[4] = {_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)),
                       _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)),
                       _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)),
                       _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero))};
        if (step == 1) {
          for (int k = 0; k < 4; ++k) _mm_storeu_ps(dst + i + 4 * k, q[k]);
        } else {  // reversed: the last quarter first, each quarter reversed
          for (int k = 0; k < 4; ++k)
            _mm_storeu_ps(dst + i + 4 * (3 - k),
                          _mm_shuffle_ps(q[k], q[k], _MM_SHUFFLE(0, 1, 2, 3)));
        }
      }
    }
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<Out>(src[i * step]);
}

#if VOLSHARD_SSE2
// 4 x 4 float blocks: four rows of the plane buffer, s_row apart, each four
// consecutive elements, transposed in registers into four output rows.
inline void transpose_block_4x4(const float* src, int64_t s_row, float* dst, int64_t d_row) {
  __m128 r0 = _mm_loadu_ps(src);
  __m128 r1 = _mm_loadu_ps(src + s_row);
  __m128 r2 = _mm_loadu_ps(src + 2 * s_row);
  __m128 r3 = _mm_loadu_ps(src + 3 * s_row);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + d_row, r1);
  _mm_storeu_ps(dst + 2 * d_row, r2);
  _mm_storeu_ps(dst + 3 * d_row, r3);
}
#endif

// Copies rows of `Out` from `In` source rows; the output's rows run across
// the source's rows (a transposing view). The source rows of a group of
// neighbouring planes are copied into a contiguous buffer in cache (converted
// to Out on the way), which is then transposed into the output rows.
//
// Why groups: the rows of one plane lie far apart (64 KiB in a 128^3
// volume), so copying a single plane reads ~100 short streams and waits on
// memory; the same row of the next planes is adjacent (one 4 KiB stretch for
// 8 planes), so a group turns each into one long sequential read. Walking the
// source directly instead hits a few cache sets over and over with the
// power-of-two strides of volumes like 128^3.
template <class In, class Out>
void gather_transposing(const In* in, int64_t na, int64_t sa, int64_t nb, int64_t sb, int64_t n2,
                        int64_t s2, Out* out, int64_t da, int64_t db) {
  const int64_t plane_elements = na * n2;
  constexpr int64_t kBufferBytes = 256 * 1024;  // half of this machine's L2
  const int64_t group = std::clamp<int64_t>(
      kBufferBytes / (plane_elements * static_cast<int64_t>(sizeof(Out))), 1, nb);
  thread_local std::vector<Out> buffer;
  buffer.resize(static_cast<size_t>(group * plane_elements));
  // The rows are too short for the hardware prefetcher: ask for a few ahead.
  constexpr int64_t kAhead = 4;
  const auto row_bytes = static_cast<int64_t>(na * sizeof(In));
  for (int64_t b0 = 0; b0 < nb; b0 += group) {
    const int64_t g_end = std::min(group, nb - b0);
    const auto prefetch_rows = [&](int64_t c) {
      for (int64_t g = 0; g < g_end; ++g) {
        const In* row = in + (b0 + g) * sb + c * s2;
        const auto* first = reinterpret_cast<const char*>(sa > 0 ? row : row - (na - 1));
        for (int64_t byte = 0; byte < row_bytes; byte += 64) __builtin_prefetch(first + byte);
        __builtin_prefetch(first + row_bytes - 1);
      }
    };
    for (int64_t c = 0; c < std::min(kAhead, n2); ++c) prefetch_rows(c);
    for (int64_t c = 0; c < n2; ++c) {  // buffer[g][c][a] = source(a, b0 + g, c)
      if (c + kAhead < n2) prefetch_rows(c + kAhead);
      for (int64_t g = 0; g < g_end; ++g) {
        copy_row(in + (b0 + g) * sb + c * s2, sa, na, buffer.data() + g * plane_elements + c * na);
      }
    }
    // Transpose so the writes are sequential: the output stride of a is
    // larger than b's when a is the slow output axis, and then rows of
    // neighbouring planes are written one after another.
    const auto transpose_rows = [&](int64_t g, int64_t a, int64_t rows) {
      const Out* plane = buffer.data() + g * plane_elements;
      Out* dst = out + (b0 + g) * db + a * da;
      int64_t c = 0;
#if VOLSHARD_SSE2
      if constexpr (std::is_same_v<Out, float>) {
        if (rows == 4) {
          for (; c + 4 <= n2; c += 4) transpose_block_4x4(plane + c * na + a, na, dst + c, da);
        }
      }
#endif
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t cc = c; cc < n2; ++cc) dst[t * da + cc] = plane[cc * na + a + t];
      }
    };
    if (da >= db) {
      for (int64_t a = 0; a < na; a += 4) {
        for (int64_t g = 0; g < g_end; ++g) transpose_rows(g, a, std::min<int64_t>(4, na - a));
      }
    } else {
      for (int64_t g = 0; g < g_end; ++g) {
        for (int64_t a = 0; a < na; a += 4) transpose_rows(g, a, std::min<int64_t>(4, na - a));
      }
    }
  }
}

template <class In, class Out>
void gather_channel(const In* in, const Strides& v, Out* out) {
  const auto [n0, n1, n2] = v.size;
  const auto [s0, s1, s2] = v.stride;
  if (s2 == 1 || s2 == -1 || n2 == 1) {  // output rows are source rows (maybe reversed)
    for (int64_t i0 = 0; i0 < n0; ++i0) {
      for (int64_t i1 = 0; i1 < n1; ++i1)
        copy_row(in + i0 * s0 + i1 * s1, s2, n2, out + (i0 * n1 + i1) * n2);
    }
    return;
  }
  if (s0 == 1 || s0 == -1) {  // a: view axis 0 (the source's rows), b: planes along view axis 1
    gather_transposing(in, n0, s0, n1, s1, n2, s2, out, n1 * n2, n2);
    return;
  }
  if (s1 == 1 || s1 == -1) {
    gather_transposing(in, n1, s1, n0, s0, n2, s2, out, n2, n1 * n2);
    return;
  }
  for (int64_t i0 = 0; i0 < n0; ++i0) {  // no unit stride anywhere: element by element
    for (int64_t i1 = 0; i1 < n1; ++i1) {
      Out* dst = out + (i0 * n1 + i1) * n2;
      for (int64_t i2 = 0; i2 < n2; ++i2)
        dst[i2] = static_cast<Out>(in[i0 * s0 + i1 * s1 + i2 * s2]);
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
    const int64_t lo = m.sign[d] > 0 ? m.origin[static_cast<size_t>(a)]
                                     : m.origin[static_cast<size_t>(a)] - m.size[d] + 1;
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
  for (int64_t c = 0; c < src.size(0); ++c)
    gather_channel(in + c * src.stride(0), v, out + c * out_channel);
}

void check_map(const at::Tensor& t, const SpatialMap& m, const char* what) {
  const auto shape = spatial_of(t);
  for (size_t d = 0; d < 3; ++d) {
    const auto a = static_cast<size_t>(m.axis[d]);
    const int64_t last = m.origin[a] + m.sign[d] * (m.size[d] - 1);
    if (m.size[d] < 1 || m.origin[a] < 0 || m.origin[a] >= shape[a] || last < 0 ||
        last >= shape[a]) {
      throw std::out_of_range(std::string("materialize: the view of the ") + what +
                              " leaves its spatial shape (" + std::to_string(shape[0]) + ", " +
                              std::to_string(shape[1]) + ", " + std::to_string(shape[2]) +
                              ") on axis " + std::to_string(a));
    }
  }
}

// dst (contiguous C x view size) = src seen through m: the host kernels for
// CPU tensors of the common dtypes, else (or with kTensorOps) ATen's ops.
void gather_into(const at::Tensor& src, const SpatialMap& m, at::Tensor& dst, const char* what,
                 Gather how) {
  if (src.dim() != 4) {
    throw std::invalid_argument(std::string("materialize: the ") + what +
                                " is not C x X x Y x Z (" + std::to_string(src.dim()) + " dims)");
  }
  check_map(src, m, what);
  const std::vector<int64_t> want{src.size(0), m.size[0], m.size[1], m.size[2]};
  if (dst.sizes() != at::IntArrayRef(want) || !dst.is_contiguous()) {
    throw std::invalid_argument(std::string("materialize: the ") + what +
                                "'s destination is not a contiguous " + std::to_string(want[0]) +
                                " x " + std::to_string(want[1]) + " x " + std::to_string(want[2]) +
                                " x " + std::to_string(want[3]) + " tensor");
  }
  const auto in = src.scalar_type(), out = dst.scalar_type();
  if (how == Gather::kTensorOps || !src.is_cpu() || !dst.is_cpu()) {
    dst.copy_(aten_view(src, m), /*non_blocking=*/!dst.is_cpu());  // ordered on dst's stream
  } else if (in == at::kFloat && out == at::kFloat) {
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
    gather_into(t, m, out, what, Gather::kAuto);
    return out;
  };
  sample.image = fresh(sample.image, "image");
  sample.label = fresh(sample.label, "label");
  sample.indices.reset();  // they indexed the source
  return sample;
}

void materialize_into(const Sample& sample, at::Tensor& image, at::Tensor& label, Gather how) {
  const SpatialMap m = view_of(sample);
  gather_into(sample.image, m, image, "image", how);
  gather_into(sample.label, m, label, "label", how);
}

SpatialMap view_of(const Sample& sample) {
  if (sample.view) return *sample.view;
  if (sample.image.dim() != 4) {
    throw std::invalid_argument("expected a C x X x Y x Z tensor, got " +
                                std::to_string(sample.image.dim()) + " dims");
  }
  return SpatialMap::identity(spatial_of(sample.image));
}

std::array<int64_t, 3> view_shape(const Sample& sample) { return view_of(sample).size; }

}  // namespace volshard
