#include "volshard/volume_io/voxel_copy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace volshard {
namespace {

enum Mode { kConvert, kScaleMul, kScaleMulAdd };

template <size_t N>
struct UintOf;
template <>
struct UintOf<1> {
  using type = uint8_t;
};
template <>
struct UintOf<2> {
  using type = uint16_t;
};
template <>
struct UintOf<4> {
  using type = uint32_t;
};
template <>
struct UintOf<8> {
  using type = uint64_t;
};

template <class U>
U bswap(U v) {
  if constexpr (sizeof(U) == 1) {
    return v;
  } else if constexpr (sizeof(U) == 2) {
    return static_cast<U>(__builtin_bswap16(v));
  } else if constexpr (sizeof(U) == 4) {
    return __builtin_bswap32(v);
  } else {
    return __builtin_bswap64(v);
  }
}

template <class S, bool Swap>
inline S load(const uint8_t* p) {
  using U = typename UintOf<sizeof(S)>::type;
  U u;
  std::memcpy(&u, p, sizeof(S));
  if constexpr (Swap) u = bswap(u);
  S s;
  std::memcpy(&s, &u, sizeof(S));
  return s;
}

// nibabel's apply_read_scaling: arr * slope (always when scaling; x * 1.0 is
// x exactly), then + inter only when inter != 0 (so -0.0 survives as numpy
// leaves it), in float64.
template <class S, class D, int M>
inline D convert(S v, double slope, double inter) {
  if constexpr (M == kConvert) {
    return static_cast<D>(v);
  } else if constexpr (M == kScaleMul) {
    return static_cast<D>(static_cast<double>(v) * slope);
  } else {
    return static_cast<D>(static_cast<double>(v) * slope + inter);
  }
}

// A narrowing read into uint8 (a compact label): 1 for a source value the
// byte cannot hold. Other outputs hold every value: 0.
template <class S, class D>
inline int64_t not_a_byte(S v) {
  if constexpr (std::is_same_v<D, uint8_t> && !std::is_same_v<S, uint8_t>) {
    if constexpr (std::is_signed_v<S>) {
      return v < 0 || v > 255;
    } else {
      return v > 255;
    }
  } else {
    (void)v;
    return 0;
  }
}

// NaN/Inf by the exponent bits: branch-free, so loops over it vectorise.
template <class D>
inline int64_t nonfinite(D v) {
  if constexpr (std::is_same_v<D, float>) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return (u & 0x7f800000u) == 0x7f800000u;
  } else if constexpr (std::is_same_v<D, double>) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
  } else {
    (void)v;
    return 0;
  }
}

// A j-block of file rows copied so that k-slice k starts at k * stride: the
// file's k-slices lie X*Y*size bytes apart, which for 2^n volumes is a
// multiple of the cache's set period, so a tile's rows would all compete for
// one set; the scratch pads each slice by a cache line. Blocks of up to 8
// rows, about 384 KB (L2), per thread.
struct PaddedRows {
  int64_t block = 1;    // rows per block
  int64_t stride = 0;   // bytes between k-slices at what fill() returns
  bool direct = false;  // no scratch: fill() returns the file's rows in place
  uint8_t* scratch = nullptr;

  const uint8_t* fill(const uint8_t* channel, int64_t row_bytes, int64_t Y, int64_t Z, int64_t j0,
                      int64_t jn) const {
    if (direct) return channel + j0 * row_bytes;
    for (int64_t k = 0; k < Z; ++k) {
      std::memcpy(scratch + k * stride, channel + (k * Y + j0) * row_bytes,
                  static_cast<size_t>(jn * row_bytes));
    }
    return scratch;
  }
};

// The scratch would outgrow its purpose for very long, thin volumes (Z in
// the millions with tiny rows): those read the file in place.
constexpr int64_t kMaxScratchBytes = int64_t{64} << 20;

PaddedRows padded_rows(int64_t row_bytes, int64_t Y, int64_t Z) {
  PaddedRows r;
  r.block = std::max<int64_t>(
      1, std::min<int64_t>(8, (int64_t{384} << 10) / std::max<int64_t>(1, Z * row_bytes)));
  r.stride = (r.block * row_bytes + 63) / 64 * 64 + 64;
  if (r.stride > kMaxScratchBytes / Z) {
    r.direct = true;
    r.stride = Y * row_bytes;
    return r;
  }
  thread_local std::vector<uint64_t> scratch;  // 8-byte aligned
  scratch.resize(static_cast<size_t>((r.stride * Z + 64) / 8 + 1));
  r.scratch = reinterpret_cast<uint8_t*>(scratch.data());
  return r;
}

#if defined(__SSE2__)
// The common cases get their own transposes in SSE2 registers, 4 x 4 blocks
// at a time: 4-byte voxels copied bit for bit (float32 or int32 in host
// byte order), int32 converted to float32 (integer labels read as MONAI's
// float), and int32 narrowed to uint8 (a compact label read). This walks the
// volume for them: every channel and file row j in [jb, je), the rows of a
// j-block first copied into the padded scratch; `op` converts a 4 x 4 block
// (block), a single voxel at the edges (edge), and closes a row (end_row).
// Returns op.bad.
template <class T, class D, class Op>
int64_t transpose4_walk(const uint8_t* src, D* dst, const VoxelCopySpec& spec, int64_t jb,
                        int64_t je, Op& op) {
  static_assert(sizeof(T) == 4, "4-byte voxels");
  const int64_t C = spec.cxyz[0], X = spec.cxyz[1], Y = spec.cxyz[2], Z = spec.cxyz[3];
  const int64_t row_bytes = X * 4;
  const PaddedRows rows = padded_rows(row_bytes, Y, Z);  // never direct here: see Kernel::run
  const int64_t JB = rows.block;
  const int64_t LS = rows.stride / 4;  // scratch elements per k-slice
  const int64_t YZ = Y * Z;
  for (int64_t c = 0; c < C; ++c) {
    const uint8_t* sc = src + c * X * Y * Z * 4;
    D* dc = dst + c * X * Y * Z;
    for (int64_t j0 = jb; j0 < je; j0 += JB) {
      const int64_t jn = std::min(JB, je - j0);
      const auto* local = reinterpret_cast<const T*>(rows.fill(sc, row_bytes, Y, Z, j0, jn));
      for (int64_t jj = 0; jj < jn; ++jj) {
        const int64_t j = j0 + jj;
        int64_t i0 = 0;
        for (; i0 + 4 <= X; i0 += 4) {
          const T* s = local + jj * X + i0;
          D* d = dc + (i0 * Y + j) * Z;
          int64_t k0 = 0;
          for (; k0 + 4 <= Z; k0 += 4) op.block(s + k0 * LS, LS, d + k0, YZ);
          for (; k0 < Z; ++k0) {
            for (int64_t r = 0; r < 4; ++r) d[r * YZ + k0] = op.edge(s[k0 * LS + r]);
          }
        }
        for (; i0 < X; ++i0) {
          for (int64_t k = 0; k < Z; ++k)
            dc[(i0 * Y + j) * Z + k] = op.edge(local[k * LS + jj * X + i0]);
        }
        op.end_row();
      }
    }
  }
  return op.bad;
}

// Bit copies or int32 -> float32; counts NaN/Inf outputs when asked.
struct Transpose4Bits {
  bool count;
  bool int_to_float;
  int64_t bad = 0;
  __m128i acc = _mm_setzero_si128();  // lanes: -count of NaN/Inf in this row
  const __m128i mask = _mm_set1_epi32(0x7f800000);

  __m128 load4(const uint32_t* p) const {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return int_to_float ? _mm_cvtepi32_ps(v)
                        : _mm_castsi128_ps(v);  // cvtdq2ps rounds as static_cast
  }
  void block(const uint32_t* sk, int64_t LS, uint32_t* d, int64_t YZ) {
    __m128 r0 = load4(sk);
    __m128 r1 = load4(sk + LS);
    __m128 r2 = load4(sk + 2 * LS);
    __m128 r3 = load4(sk + 3 * LS);
    if (count) {
      for (const __m128 r : {r0, r1, r2, r3}) {
        acc = _mm_sub_epi32(acc, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(r), mask), mask));
      }
    }
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_castps_si128(r0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + YZ), _mm_castps_si128(r1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * YZ), _mm_castps_si128(r2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 3 * YZ), _mm_castps_si128(r3));
  }
  uint32_t edge(uint32_t v) {
    if (int_to_float) {
      const auto f = static_cast<float>(static_cast<int32_t>(v));
      std::memcpy(&v, &f, 4);
    }
    if (count) bad += (v & 0x7f800000u) == 0x7f800000u;
    return v;
  }
  void end_row() {
    alignas(16) uint32_t lanes[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc);
    bad += int64_t{lanes[0]} + lanes[1] + lanes[2] + lanes[3];
    acc = _mm_setzero_si128();
  }
};

// int32 -> uint8: the low byte of each value, as static_cast<uint8_t>.
// bad is 0 when every value lies in [0, 255], else positive (the caller
// then reads the volume another way).
struct Transpose4Bytes {
  int64_t bad = 0;
  __m128i outside = _mm_setzero_si128();  // bits set where some value left [0, 255]
  const __m128i top = _mm_set1_epi32(255);

  void block(const int32_t* sk, int64_t LS, uint8_t* d, int64_t YZ) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sk));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sk + LS));
    const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sk + 2 * LS));
    const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sk + 3 * LS));
    // outside [0, 255]: any bit above the low byte (negatives too)
    const __m128i high = _mm_or_si128(_mm_or_si128(v0, v1), _mm_or_si128(v2, v3));
    outside = _mm_or_si128(outside, _mm_andnot_si128(top, high));
    // The low bytes packed in order: byte 4 * q + i is (i, k0 + q).
    const __m128i w01 = _mm_packs_epi32(_mm_and_si128(v0, top), _mm_and_si128(v1, top));
    const __m128i w23 = _mm_packs_epi32(_mm_and_si128(v2, top), _mm_and_si128(v3, top));
    const __m128i b = _mm_packus_epi16(w01, w23);
    // (q, i) -> (i, q): pairs (k0, k0 + 1) and (k0 + 2, k0 + 3) of each i,
    // then the two pairs side by side: dword i is output row i.
    const __m128i t0 = _mm_unpacklo_epi8(b, _mm_srli_si128(b, 4));
    const __m128i t1 = _mm_unpacklo_epi8(_mm_srli_si128(b, 8), _mm_srli_si128(b, 12));
    alignas(16) uint32_t four[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(four), _mm_unpacklo_epi16(t0, t1));
    for (int q = 0; q < 4; ++q) std::memcpy(d + q * YZ, &four[q], 4);
  }
  uint8_t edge(int32_t v) {
    bad += v < 0 || v > 255;
    return static_cast<uint8_t>(v);
  }
  void end_row() {
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(outside, _mm_setzero_si128())) != 0xFFFF) ++bad;
    outside = _mm_setzero_si128();
  }
};
#endif

// Tiles of TK x TI voxels (k by i) at one j: each source row segment and
// each destination row segment is touched once, in one burst; 16 x 16 keeps
// the tile in L1 and, for 4-byte outputs, writes whole 64-byte lines.
constexpr int64_t kTile = 16;

template <class S, class D, bool Swap, int M>
struct Kernel {
  static int64_t to_c_order(const uint8_t* src, D* dst, const VoxelCopySpec& spec, int64_t jb,
                            int64_t je) {
    const int64_t C = spec.cxyz[0], X = spec.cxyz[1], Y = spec.cxyz[2], Z = spec.cxyz[3];
    const double slope = spec.slope, inter = spec.inter;
    constexpr auto es = static_cast<int64_t>(sizeof(S));
    // Rows of a j-block go through a scratch with padded k-slices first (see
    // padded_rows): reading the file's k-slices in place would hit one cache
    // set per tile on 2^n-sized volumes.
    const PaddedRows rows = padded_rows(X * es, Y, Z);
    alignas(64) D tile[kTile][kTile];
    int64_t bad = 0;
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t* sc = src + c * X * Y * Z * es;
      D* dc = dst + c * X * Y * Z;
      for (int64_t j0 = jb; j0 < je; j0 += rows.block) {
        const int64_t jn = std::min(rows.block, je - j0);
        const uint8_t* local = rows.fill(sc, X * es, Y, Z, j0, jn);
        for (int64_t jj = 0; jj < jn; ++jj) {
          const int64_t j = j0 + jj;
          for (int64_t i0 = 0; i0 < X; i0 += kTile) {
            const int64_t ni = std::min(kTile, X - i0);
            for (int64_t k0 = 0; k0 < Z; k0 += kTile) {
              const int64_t nk = std::min(kTile, Z - k0);
              const uint8_t* base = local + k0 * rows.stride + (jj * X + i0) * es;
              if (ni == kTile && nk == kTile) {
                // tile[ii][kk]: scattered writes into L1, then whole output rows.
                for (int64_t kk = 0; kk < kTile; ++kk) {
                  const uint8_t* row = base + kk * rows.stride;
                  for (int64_t ii = 0; ii < kTile; ++ii) {
                    const S v = load<S, Swap>(row + ii * es);
                    bad += not_a_byte<S, D>(v);
                    tile[ii][kk] = convert<S, D, M>(v, slope, inter);
                  }
                }
                if constexpr (std::is_floating_point_v<D>) {
                  for (int64_t ii = 0; ii < kTile; ++ii)
                    for (int64_t kk = 0; kk < kTile; ++kk) bad += nonfinite(tile[ii][kk]);
                }
                for (int64_t ii = 0; ii < kTile; ++ii) {
                  std::memcpy(dc + ((i0 + ii) * Y + j) * Z + k0, tile[ii], sizeof(tile[ii]));
                }
              } else {
                for (int64_t kk = 0; kk < nk; ++kk) {
                  const uint8_t* row = base + kk * rows.stride;
                  for (int64_t ii = 0; ii < ni; ++ii) {
                    const S v = load<S, Swap>(row + ii * es);
                    bad += not_a_byte<S, D>(v);
                    tile[kk][ii] = convert<S, D, M>(v, slope, inter);
                    bad += nonfinite(tile[kk][ii]);
                  }
                }
                for (int64_t ii = 0; ii < ni; ++ii) {
                  D* out = dc + ((i0 + ii) * Y + j) * Z + k0;
                  for (int64_t kk = 0; kk < nk; ++kk) out[kk] = tile[kk][ii];
                }
              }
            }
          }
        }
      }
    }
    return bad;
  }

  static int64_t keep_file_order(const uint8_t* src, D* dst, const VoxelCopySpec& spec, int64_t jb,
                                 int64_t je) {
    const int64_t C = spec.cxyz[0], X = spec.cxyz[1], Y = spec.cxyz[2], Z = spec.cxyz[3];
    constexpr auto es = static_cast<int64_t>(sizeof(S));
    int64_t bad = 0;
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t k = 0; k < Z; ++k) {
        for (int64_t j = jb; j < je; ++j) {
          const int64_t offset = ((c * Z + k) * Y + j) * X;
          const uint8_t* row = src + offset * es;
          D* out = dst + offset;
          if constexpr (std::is_same_v<S, D> && !Swap && M == kConvert) {
            std::memcpy(out, row, static_cast<size_t>(X * es));
            if constexpr (std::is_floating_point_v<D>) {
              bad += count_nonfinite(
                  out, X,
                  std::is_same_v<D, float> ? NiftiDatatype::kFloat32 : NiftiDatatype::kFloat64);
            }
          } else {
            for (int64_t i = 0; i < X; ++i) {
              const S v = load<S, Swap>(row + i * es);
              bad += not_a_byte<S, D>(v);
              out[i] = convert<S, D, M>(v, spec.slope, spec.inter);
              bad += nonfinite(out[i]);
            }
          }
        }
      }
    }
    return bad;
  }

  static int64_t run(const uint8_t* src, void* dst, const VoxelCopySpec& spec, int64_t jb,
                     int64_t je) {
    D* d = static_cast<D*>(dst);
#if defined(__SSE2__)
    // 4-byte voxels into C order through the padded scratch: one SSE walk,
    // with an op per conversion.
    if constexpr (sizeof(S) == 4 && !Swap && M == kConvert) {
      if (spec.to_c_order && !padded_rows(spec.cxyz[1] * 4, spec.cxyz[2], spec.cxyz[3]).direct) {
        if constexpr (std::is_same_v<S, D>) {
          Transpose4Bits op{std::is_floating_point_v<D>, false};
          return transpose4_walk<uint32_t>(src, reinterpret_cast<uint32_t*>(d), spec, jb, je, op);
        } else if constexpr (std::is_same_v<S, int32_t> && std::is_same_v<D, float>) {
          Transpose4Bits op{false, true};
          return transpose4_walk<uint32_t>(src, reinterpret_cast<uint32_t*>(d), spec, jb, je, op);
        } else if constexpr (std::is_same_v<S, int32_t> && std::is_same_v<D, uint8_t>) {
          Transpose4Bytes op;
          return transpose4_walk<int32_t>(src, d, spec, jb, je, op);
        }
      }
    }
#endif
    return spec.to_c_order ? to_c_order(src, d, spec, jb, je)
                           : keep_file_order(src, d, spec, jb, je);
  }
};

template <class S, class D, bool Swap>
int64_t dispatch_mode(const uint8_t* src, void* dst, const VoxelCopySpec& spec, int64_t jb,
                      int64_t je) {
  if (!spec.scale) return Kernel<S, D, Swap, kConvert>::run(src, dst, spec, jb, je);
  if constexpr (std::is_floating_point_v<D>) {
    if (spec.inter != 0) return Kernel<S, D, Swap, kScaleMulAdd>::run(src, dst, spec, jb, je);
    return Kernel<S, D, Swap, kScaleMul>::run(src, dst, spec, jb, je);
  }
  throw std::invalid_argument("copy_voxels: scaling needs a float32 or float64 output");
}

// The value-preserving output for each source type, as ATen has them.
template <class S>
struct Natural {
  using type = S;
};
template <>
struct Natural<uint16_t> {
  using type = int32_t;
};
template <>
struct Natural<uint32_t> {
  using type = int64_t;
};

template <class S, bool Swap>
int64_t dispatch_dst(const uint8_t* src, void* dst, const VoxelCopySpec& spec, int64_t jb,
                     int64_t je) {
  using N = typename Natural<S>::type;
  switch (spec.dst_type) {
    case NiftiDatatype::kFloat32:
      return dispatch_mode<S, float, Swap>(src, dst, spec, jb, je);
    case NiftiDatatype::kFloat64:
      return dispatch_mode<S, double, Swap>(src, dst, spec, jb, je);
    default:
      break;
  }
  if constexpr (std::is_integral_v<S> && !std::is_same_v<S, uint8_t>) {
    if (spec.dst_type == NiftiDatatype::kUint8 && spec.narrow_to_uint8) {
      return dispatch_mode<S, uint8_t, Swap>(src, dst, spec, jb, je);
    }
  }
  const bool natural = (spec.dst_type == NiftiDatatype::kUint8 && std::is_same_v<N, uint8_t>) ||
                       (spec.dst_type == NiftiDatatype::kInt8 && std::is_same_v<N, int8_t>) ||
                       (spec.dst_type == NiftiDatatype::kInt16 && std::is_same_v<N, int16_t>) ||
                       (spec.dst_type == NiftiDatatype::kInt32 && std::is_same_v<N, int32_t>) ||
                       (spec.dst_type == NiftiDatatype::kInt64 && std::is_same_v<N, int64_t>);
  if (!natural) {
    throw std::invalid_argument(
        "copy_voxels: " + to_string(spec.src_type) + " -> " + to_string(spec.dst_type) +
        " is not supported (outputs: the value-preserving type, float32, float64)");
  }
  if constexpr (!std::is_floating_point_v<N>) {
    return dispatch_mode<S, N, Swap>(src, dst, spec, jb, je);
  }
  return 0;  // unreachable: floating N is handled by the switch
}

template <class S>
int64_t dispatch_swap(const uint8_t* src, void* dst, const VoxelCopySpec& spec, int64_t jb,
                      int64_t je) {
  const uint16_t one = 1;
  uint8_t first;
  std::memcpy(&first, &one, 1);
  const bool host_big = first == 0;
  if (spec.src_big_endian != host_big && sizeof(S) > 1)
    return dispatch_dst<S, true>(src, dst, spec, jb, je);
  return dispatch_dst<S, false>(src, dst, spec, jb, je);
}

template <class U>
void reverse_kernel(const U* src, U* dst, const std::array<int64_t, 4>& cxyz, int64_t jb,
                    int64_t je) {
  const int64_t C = cxyz[0], X = cxyz[1], Y = cxyz[2], Z = cxyz[3];
  alignas(64) U tile[kTile][kTile];  // [ii][kk]
  for (int64_t c = 0; c < C; ++c) {
    const U* sc = src + c * X * Y * Z;
    U* dc = dst + c * X * Y * Z;
    for (int64_t j = jb; j < je; ++j) {
      for (int64_t k0 = 0; k0 < Z; k0 += kTile) {
        const int64_t nk = std::min(kTile, Z - k0);
        for (int64_t i0 = 0; i0 < X; i0 += kTile) {
          const int64_t ni = std::min(kTile, X - i0);
          for (int64_t ii = 0; ii < ni; ++ii) {
            const U* row = sc + ((i0 + ii) * Y + j) * Z + k0;
            for (int64_t kk = 0; kk < nk; ++kk) tile[ii][kk] = row[kk];
          }
          for (int64_t kk = 0; kk < nk; ++kk) {
            U* out = dc + ((k0 + kk) * Y + j) * X + i0;
            for (int64_t ii = 0; ii < ni; ++ii) out[ii] = tile[ii][kk];
          }
        }
      }
    }
  }
}

void check_spec(const std::array<int64_t, 4>& cxyz, int64_t jb, int64_t je) {
  for (int i = 0; i < 4; ++i) {
    if (cxyz[static_cast<size_t>(i)] < 1) {
      throw std::invalid_argument("copy_voxels: cxyz[" + std::to_string(i) + "]=" +
                                  std::to_string(cxyz[static_cast<size_t>(i)]) + " must be >= 1");
    }
  }
  if (jb < 0 || je > cxyz[2] || jb > je) {
    throw std::invalid_argument("copy_voxels: rows [" + std::to_string(jb) + ", " +
                                std::to_string(je) + ") must lie in [0, " +
                                std::to_string(cxyz[2]) + ")");
  }
}

}  // namespace

int64_t count_nonfinite(const void* data, int64_t n, NiftiDatatype type) {
  int64_t bad = 0;
  if (type == NiftiDatatype::kFloat32) {
    const auto* p = static_cast<const uint8_t*>(data);
    int64_t i = 0;
#if defined(__SSE2__)
    const __m128i mask = _mm_set1_epi32(0x7f800000);
    while (i + 4 <= n) {
      // per-lane counts stay below 2^31: flush every 2^28 blocks
      const int64_t end = std::min(n - (n - i) % 4, i + (int64_t{1} << 30));
      __m128i acc = _mm_setzero_si128();
      for (; i < end; i += 4) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * 4));
        acc = _mm_sub_epi32(acc, _mm_cmpeq_epi32(_mm_and_si128(v, mask), mask));
      }
      alignas(16) uint32_t lanes[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc);
      bad += int64_t{lanes[0]} + lanes[1] + lanes[2] + lanes[3];
    }
#endif
    for (; i < n; ++i) {
      float v;
      std::memcpy(&v, p + i * 4, 4);
      bad += nonfinite(v);
    }
  } else if (type == NiftiDatatype::kFloat64) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, p + i * 8, 8);
      bad += nonfinite(v);
    }
  }
  return bad;
}

int64_t copy_voxels(const uint8_t* src, void* dst, const VoxelCopySpec& spec, int64_t j_begin,
                    int64_t j_end) {
  check_spec(spec.cxyz, j_begin, j_end);
  switch (spec.src_type) {
    case NiftiDatatype::kUint8:
      return dispatch_swap<uint8_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kInt8:
      return dispatch_swap<int8_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kInt16:
      return dispatch_swap<int16_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kUint16:
      return dispatch_swap<uint16_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kInt32:
      return dispatch_swap<int32_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kUint32:
      return dispatch_swap<uint32_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kInt64:
      return dispatch_swap<int64_t>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kFloat32:
      return dispatch_swap<float>(src, dst, spec, j_begin, j_end);
    case NiftiDatatype::kFloat64:
      return dispatch_swap<double>(src, dst, spec, j_begin, j_end);
  }
  throw std::invalid_argument("copy_voxels: unknown source datatype");
}

void c_order_to_file_order(const void* src, uint8_t* dst, NiftiDatatype type,
                           const std::array<int64_t, 4>& cxyz, int64_t j_begin, int64_t j_end) {
  check_spec(cxyz, j_begin, j_end);
  switch (element_size(type)) {
    case 1:
      reverse_kernel(static_cast<const uint8_t*>(src), dst, cxyz, j_begin, j_end);
      return;
    case 2:
      reverse_kernel(static_cast<const uint16_t*>(src), reinterpret_cast<uint16_t*>(dst), cxyz,
                     j_begin, j_end);
      return;
    case 4:
      reverse_kernel(static_cast<const uint32_t*>(src), reinterpret_cast<uint32_t*>(dst), cxyz,
                     j_begin, j_end);
      return;
    default:
      reverse_kernel(static_cast<const uint64_t*>(src), reinterpret_cast<uint64_t*>(dst), cxyz,
                     j_begin, j_end);
      return;
  }
}

}  // namespace volshard
