// The host kernels' AVX2 loops: RandAffine's warp and RandGaussianNoise's
// field four lanes at a time, RandGaussianSmooth's pass along rows eight;
// each the plain loop's arithmetic operation for operation, so the bits are
// the same (-ffp-contract=off and no -mfma: no fused multiply-add). Built with
// -mavx2 on x86-64 only; called only where the CPU has AVX2 (avx2_available).

#include "simd.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace volshard::detail {

namespace {

// Four floats at base[idx[k]], widened to float64.
inline __m256d gather4(const float* base, __m128i idx) {
  return _mm256_cvtps_pd(_mm_i32gather_ps(base, idx, 4));
}

// a + (b - a) * w, as the plain loop writes each of its seven interpolations.
inline __m256d lerp(__m256d a, __m256d b, __m256d w) {
  return _mm256_add_pd(a, _mm256_mul_pd(_mm256_sub_pd(b, a), w));
}

}  // namespace

template <class L>
int64_t warp_row_avx2(const WarpRow<L>& r, const double (&row)[3], int64_t at, int64_t count,
                      int64_t* rest) {
  const __m256d zero = _mm256_setzero_pd(), half = _mm256_set1_pd(0.5),
                one = _mm256_set1_pd(1.0), lanes = _mm256_set_pd(3, 2, 1, 0);
  const __m128i odd_bit = _mm_set1_epi32(1);
  __m256d last[3], start[3], step[3];
  __m128i stride[3], label_stride[3];
  for (int a = 0; a < 3; ++a) {
    last[a] = _mm256_set1_pd(r.last[a]);
    start[a] = _mm256_set1_pd(row[a]);
    step[a] = _mm256_set1_pd(r.B[a][2]);
    stride[a] = _mm_set1_epi32(r.stride[a]);
    label_stride[a] = _mm_set1_epi32(r.label_stride[a]);
  }
  int64_t listed = 0;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const __m256d index = _mm256_add_pd(_mm256_set1_pd(static_cast<double>(i)), lanes);
    __m256d p[3];
    for (int a = 0; a < 3; ++a) p[a] = _mm256_add_pd(start[a], _mm256_mul_pd(step[a], index));
    if (r.offsets) {  // Rand3DElastic: j + offsets(j) through the map
      const float* d = r.offsets + at + i;
      const __m256d d0 = _mm256_cvtps_pd(_mm_loadu_ps(d)),
                    d1 = _mm256_cvtps_pd(_mm_loadu_ps(d + r.plane)),
                    d2 = _mm256_cvtps_pd(_mm_loadu_ps(d + 2 * r.plane));
      for (int a = 0; a < 3; ++a) {
        const __m256d moved =
            _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(r.B[a][0]), d0),
                                        _mm256_mul_pd(_mm256_set1_pd(r.B[a][1]), d1)),
                          _mm256_mul_pd(_mm256_set1_pd(r.B[a][2]), d2));
        p[a] = _mm256_add_pd(p[a], moved);
      }
    }
    __m256d inside = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    for (int a = 0; a < 3; ++a) {  // ordered compares: a NaN position goes to the plain loop
      inside = _mm256_and_pd(inside, _mm256_cmp_pd(p[a], zero, _CMP_GE_OQ));
      inside = _mm256_and_pd(inside, _mm256_cmp_pd(p[a], last[a], _CMP_LT_OQ));
    }
    if (_mm256_movemask_pd(inside) != 0xF) {
      for (int64_t k = 0; k < 4; ++k) rest[listed++] = i + k;
      continue;
    }
    __m128i lo[3];
    __m256d w[3];  // the upper neighbour's weight
    for (int a = 0; a < 3; ++a) {
      lo[a] = _mm256_cvttpd_epi32(p[a]);  // p >= 0: truncation is floor
      w[a] = _mm256_sub_pd(p[a], _mm256_cvtepi32_pd(lo[a]));
    }
    if (r.label) {  // nearest, ties to even: up where w > 0.5, or w == 0.5 and lo is odd
      __m128i offset = _mm_setzero_si128();
      for (int a = 0; a < 3; ++a) {
        const __m256d odd = _mm256_cvtepi32_pd(_mm_and_si128(lo[a], odd_bit));
        const __m256d up = _mm256_or_pd(
            _mm256_cmp_pd(w[a], half, _CMP_GT_OQ),
            _mm256_and_pd(_mm256_cmp_pd(w[a], half, _CMP_EQ_OQ), _mm256_cmp_pd(odd, one, _CMP_EQ_OQ)));
        const __m128i k = _mm_add_epi32(lo[a], _mm256_cvttpd_epi32(_mm256_and_pd(up, one)));
        offset = _mm_add_epi32(offset, _mm_mullo_epi32(k, label_stride[a]));
      }
      alignas(16) int32_t o[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(o), offset);
      for (int64_t c = 0; c < r.label_channels; ++c) {
        const L* source = r.label + c * r.label_channel_stride;
        L* target = r.label_out + c * r.plane + at + i;
        for (int k = 0; k < 4; ++k) target[k] = source[o[k]];
      }
    }
    const __m128i base = _mm_add_epi32(
        _mm_add_epi32(_mm_mullo_epi32(lo[0], stride[0]), _mm_mullo_epi32(lo[1], stride[1])),
        _mm_mullo_epi32(lo[2], stride[2]));
    const __m128i b1 = _mm_add_epi32(base, stride[1]), b0 = _mm_add_epi32(base, stride[0]),
                  b01 = _mm_add_epi32(b0, stride[1]);
    for (int64_t c = 0; c < r.image_channels; ++c) {
      const float* q = r.image + c * r.image_channel_stride;
      const __m256d c00 = lerp(gather4(q, base), gather4(q, _mm_add_epi32(base, stride[2])), w[2]);
      const __m256d c01 = lerp(gather4(q, b1), gather4(q, _mm_add_epi32(b1, stride[2])), w[2]);
      const __m256d c10 = lerp(gather4(q, b0), gather4(q, _mm_add_epi32(b0, stride[2])), w[2]);
      const __m256d c11 = lerp(gather4(q, b01), gather4(q, _mm_add_epi32(b01, stride[2])), w[2]);
      const __m256d value = lerp(lerp(c00, c01, w[1]), lerp(c10, c11, w[1]), w[0]);
      _mm_storeu_ps(r.image_out + c * r.plane + at + i, _mm256_cvtpd_ps(value));
    }
  }
  for (; i < count; ++i) rest[listed++] = i;
  return listed;
}

namespace {

__m256d splat(double x) { return _mm256_set1_pd(x); }
__m256i splat64(int64_t x) { return _mm256_set1_epi64x(x); }

// intensity.cpp's hash32 in eight lanes (mod 2^32 products).
__m256i hash32(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int32_t>(0x7feb352du)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

// Four uint32 as exact float64.
__m256d unsigned_to_double(__m128i x) {
  const __m128i shifted = _mm_xor_si128(x, _mm_set1_epi32(static_cast<int32_t>(0x80000000u)));
  return _mm256_add_pd(_mm256_cvtepi32_pd(shifted), splat(2147483648.0));
}

// intensity.cpp's fdlibm_log for normal x > 0: both of its branches, blended.
__m256d log4(__m256d x) {
  using namespace fdlibm;
  __m256i bits = _mm256_castpd_si256(x);
  __m256i hx = _mm256_srli_epi64(bits, 32);  // the high word
  __m256i k = _mm256_sub_epi64(_mm256_srli_epi64(hx, 20), splat64(1023));
  hx = _mm256_and_si256(hx, splat64(0x000fffff));
  const __m256i i = _mm256_and_si256(_mm256_add_epi64(hx, splat64(0x95f64)), splat64(0x100000));
  const __m256i high = _mm256_or_si256(hx, _mm256_xor_si256(i, splat64(0x3ff00000)));
  bits = _mm256_or_si256(_mm256_slli_epi64(high, 32), _mm256_and_si256(bits, splat64(0xffffffff)));
  k = _mm256_add_epi64(k, _mm256_srli_epi64(i, 20));
  // k (|k| < 2048) to float64 exactly: the bits of 2^52 + k + 2048, less 2^52 + 2048.
  const __m256d dk =
      _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(k, splat64(0x4330000000000000 + 2048))),
                    splat(4503599627370496.0 + 2048.0));
  const __m256d f = _mm256_sub_pd(_mm256_castsi256_pd(bits), splat(1.0));
  const __m256d s = _mm256_div_pd(f, _mm256_add_pd(splat(2.0), f));
  const __m256d z = _mm256_mul_pd(s, s), w = _mm256_mul_pd(z, z);
  const __m256d t1 = _mm256_mul_pd(
      w, _mm256_add_pd(splat(kLg2),
                       _mm256_mul_pd(w, _mm256_add_pd(splat(kLg4), _mm256_mul_pd(w, splat(kLg6))))));
  const __m256d t2 = _mm256_mul_pd(
      z, _mm256_add_pd(
             splat(kLg1),
             _mm256_mul_pd(w, _mm256_add_pd(splat(kLg3),
                                            _mm256_mul_pd(w, _mm256_add_pd(splat(kLg5),
                                                                           _mm256_mul_pd(w, splat(kLg7))))))));
  const __m256d R = _mm256_add_pd(t2, t1);
  const __m256d hi = _mm256_mul_pd(dk, splat(kLn2Hi)), lo = _mm256_mul_pd(dk, splat(kLn2Lo));
  const __m256d hfsq = _mm256_mul_pd(_mm256_mul_pd(splat(0.5), f), f);
  const __m256d far = _mm256_sub_pd(
      hi, _mm256_sub_pd(
              _mm256_sub_pd(hfsq, _mm256_add_pd(_mm256_mul_pd(s, _mm256_add_pd(hfsq, R)), lo)), f));
  const __m256d near = _mm256_sub_pd(
      hi, _mm256_sub_pd(_mm256_sub_pd(_mm256_mul_pd(s, _mm256_sub_pd(f, R)), lo), f));
  const __m256i which = _mm256_cmpgt_epi64(
      _mm256_or_si256(_mm256_sub_epi64(hx, splat64(0x6147a)), _mm256_sub_epi64(splat64(0x6b851), hx)),
      _mm256_setzero_si256());
  return _mm256_blendv_pd(near, far, _mm256_castsi256_pd(which));
}

// intensity.cpp's fdlibm_sincos for t in [0, 2 pi): the quadrant's sine and cosine.
void sincos4(__m256d t, __m256d& sine, __m256d& cosine) {
  using namespace fdlibm;
  const __m128i n = _mm256_cvttpd_epi32(_mm256_add_pd(_mm256_mul_pd(t, splat(kInvPio2)), splat(0.5)));
  const __m256d fn = _mm256_cvtepi32_pd(n);
  const __m256d x = _mm256_sub_pd(_mm256_sub_pd(t, _mm256_mul_pd(fn, splat(kPio2Hi))),
                                  _mm256_mul_pd(fn, splat(kPio2Lo)));
  const __m256d z = _mm256_mul_pd(x, x);
  const auto poly = [z](std::initializer_list<double> c) {  // c0 + z (c1 + z (...))
    const double* last = c.end() - 1;
    __m256d r = splat(*last);
    for (const double* k = last - 1; k >= c.begin(); --k) r = _mm256_add_pd(splat(*k), _mm256_mul_pd(z, r));
    return r;
  };
  const __m256d sx = _mm256_add_pd(
      x, _mm256_mul_pd(_mm256_mul_pd(z, x), poly({kS1, kS2, kS3, kS4, kS5, kS6})));
  const __m256d r = _mm256_mul_pd(z, poly({kC1, kC2, kC3, kC4, kC5, kC6}));
  const __m256d hz = _mm256_mul_pd(splat(0.5), z), w = _mm256_sub_pd(splat(1.0), hz);
  const __m256d cx = _mm256_add_pd(
      w, _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(splat(1.0), w), hz), _mm256_mul_pd(z, r)));
  // Quadrant q = n & 3: sine is sx, cx, -sx, -cx; cosine cx, -sx, -cx, sx.
  const __m256i q = _mm256_cvtepi32_epi64(_mm_and_si128(n, _mm_set1_epi32(3)));
  const __m256d odd = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, splat64(1)), splat64(1)));
  const __m256d sign = _mm256_castsi256_pd(splat64(INT64_MIN));
  const __m256d sine_negative = _mm256_castsi256_pd(_mm256_cmpgt_epi64(q, splat64(1)));  // q 2, 3
  const __m256d cosine_negative = _mm256_castsi256_pd(
      _mm256_or_si256(_mm256_cmpeq_epi64(q, splat64(1)), _mm256_cmpeq_epi64(q, splat64(2))));
  sine = _mm256_xor_pd(_mm256_blendv_pd(sx, cx, odd), _mm256_and_pd(sine_negative, sign));
  cosine = _mm256_xor_pd(_mm256_blendv_pd(cx, sx, odd), _mm256_and_pd(cosine_negative, sign));
}

}  // namespace

void noise_pairs_avx2(double* out, int64_t begin, int64_t end, uint32_t k0, uint32_t k1,
                      uint32_t s0, uint32_t s1) {
  const __m256i first_keys = _mm256_setr_epi32(
      static_cast<int32_t>(k0), static_cast<int32_t>(k0), static_cast<int32_t>(k0),
      static_cast<int32_t>(k0), static_cast<int32_t>(s0), static_cast<int32_t>(s0),
      static_cast<int32_t>(s0), static_cast<int32_t>(s0));
  const __m256i second_keys = _mm256_setr_epi32(
      static_cast<int32_t>(k1), static_cast<int32_t>(k1), static_cast<int32_t>(k1),
      static_cast<int32_t>(k1), static_cast<int32_t>(s1), static_cast<int32_t>(s1),
      static_cast<int32_t>(s1), static_cast<int32_t>(s1));
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3);
  for (int64_t i = begin; i + 4 <= end; i += 4) {
    // Lanes 0-3: pairs i..i+3 keyed with (k0, k1); lanes 4-7: with (s0, s1).
    const __m256i index =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(i))), lanes);
    const __m256i bits = hash32(_mm256_xor_si256(hash32(_mm256_xor_si256(index, first_keys)), second_keys));
    const __m256d u1 = _mm256_mul_pd(
        _mm256_add_pd(unsigned_to_double(_mm256_castsi256_si128(bits)), splat(0.5)), splat(0x1.0p-32));
    const __m256d theta = _mm256_mul_pd(unsigned_to_double(_mm256_extracti128_si256(bits, 1)),
                                        splat(0x1.0p-32 * kTwoPi));
    const __m256d r = _mm256_sqrt_pd(_mm256_mul_pd(log4(u1), splat(-2.0)));
    __m256d sine, cosine;
    sincos4(theta, sine, cosine);
    const __m256d c = _mm256_mul_pd(r, cosine), s = _mm256_mul_pd(r, sine);
    const __m256d low = _mm256_unpacklo_pd(c, s), high = _mm256_unpackhi_pd(c, s);  // c0 s0 c2 s2, c1 s1 c3 s3
    double* pair = out + 2 * (i - begin);
    _mm256_storeu_pd(pair, _mm256_permute2f128_pd(low, high, 0x20));
    _mm256_storeu_pd(pair + 4, _mm256_permute2f128_pd(low, high, 0x31));
  }
}

void filter_row_avx2(const float* src, float* dst, int64_t n, const float* w, int64_t taps,
                     std::vector<float>& padded) {
  // The row between `pad` zeros on each side, every output's sum over all
  // taps in order, eight outputs at a time. The zeros change no sum: from +0,
  // adding +0 leaves every partial sum as it was (a sum that starts at +0
  // never becomes -0), so the bits are the plain loop's, which adds only the
  // taps inside the row.
  const int64_t pad = (taps - 1) / 2, groups = (n + 7) / 8;
  padded.resize(static_cast<size_t>(groups * 8 + taps - 1), 0.0f);  // zeros once, then kept
  std::copy(src, src + n, padded.begin() + pad);
  for (int64_t g = 0; g < groups; ++g) {
    __m256 sum = _mm256_setzero_ps();
    const float* x = padded.data() + 8 * g;
    for (int64_t k = 0; k < taps; ++k)
      sum = _mm256_add_ps(sum, _mm256_mul_ps(_mm256_set1_ps(w[k]), _mm256_loadu_ps(x + k)));
    alignas(32) float values[8];
    _mm256_store_ps(values, sum);
    std::copy(values, values + std::min<int64_t>(8, n - 8 * g), dst + 8 * g);
  }
}

template int64_t warp_row_avx2<uint8_t>(const WarpRow<uint8_t>&, const double (&)[3], int64_t,
                                        int64_t, int64_t*);
template int64_t warp_row_avx2<float>(const WarpRow<float>&, const double (&)[3], int64_t,
                                      int64_t, int64_t*);

}  // namespace volshard::detail
