#pragma once
// The host kernels' AVX2 loops, private to transforms/ (and its tests):
// RandAffine's warp, RandGaussianNoise's field and RandGaussianSmooth's
// passes, on x86-64 CPUs with AVX2
// the plain loops' arithmetic four lanes at a time (simd_avx2.cpp, the one
// file built with -mavx2, called only where the CPU has it).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

#include "volshard/transforms/spatial.h"

namespace volshard::detail {

/// Which host loop a kernel runs for CPU tensors: kAuto the AVX2 one where
/// the CPU has it, kScalar the plain one. Both give the same bits: the same
/// float64 operations in the same order (no fused multiply-add), four lanes
/// at a time.
enum class HostLoop { kAuto, kScalar };

/// Whether this CPU runs the AVX2 loops (and this build has them).
bool avx2_available();

/// warp_view (spatial.h) with the host loop chosen.
Sample warp_view(Sample sample, const Matrix4& matrix, PaddingMode padding, Gather how,
                 const at::Tensor& offsets, HostLoop loop);

/// gaussian_noise_field (intensity.h) on the host with the loop chosen.
at::Tensor gaussian_noise_field(at::IntArrayRef shape, uint64_t key, HostLoop loop);

/// gaussian_smooth (intensity.h) of a C x X x Y x Z CPU tensor, its host
/// passes with the loop chosen.
at::Tensor gaussian_smooth(const at::Tensor& image, const std::array<double, 3>& sigma,
                           double truncated, HostLoop loop);

// ---- RandGaussianSmooth's separable passes ----------------------------------

/// intensity.cpp's filter_axis along a row (its last pass, inner == 1):
/// dst[i] = the sum over taps k in order, from 0, of w[k] src[i + k - pad]
/// where i + k - pad is in [0, n) (zero padding), pad = (taps - 1) / 2; each
/// sum kept in a register, eight outputs at a time. (Its passes across rows
/// stream whole rows and are memory-bound: the plain loop runs them.)
/// `padded`: the caller's scratch for the row between its zeros, kept from
/// row to row of one n and taps (its zeros stay; only the row is copied in).
/// Call only where avx2_available().
void filter_row_avx2(const float* src, float* dst, int64_t n, const float* w, int64_t taps,
                     std::vector<float>& padded);

// ---- RandGaussianNoise's field ----------------------------------------------

/// Box-Muller's angle scale: theta = bits * 2^-32 * kTwoPi.
inline constexpr double kTwoPi = 6.283185307179586;

/// fdlibm's log (e_log.c) and sin/cos kernels (k_sin.c, k_cos.c, one step of
/// e_rem_pio2.c's reduction): the noise field's Box-Muller in the same
/// float64 operations in both loops, so that its bits depend on neither libm
/// nor the CPU. Within 1 ulp of log and 1.2e-16 of sin and cos on the
/// field's arguments (u in (0, 1), theta in [0, 2 pi)).
namespace fdlibm {
inline constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
inline constexpr double kLg1 = 6.666666666666735130e-01, kLg2 = 3.999999999940941908e-01,
                        kLg3 = 2.857142874366239149e-01, kLg4 = 2.222219843214978396e-01,
                        kLg5 = 1.818357216161805012e-01, kLg6 = 1.531383769920937332e-01,
                        kLg7 = 1.479819860511658591e-01;
inline constexpr double kInvPio2 = 6.36619772367581382433e-01,
                        kPio2Hi = 1.57079632673412561417e+00,  // pi/2's first 33 bits
                        kPio2Lo = 6.07710050650619224932e-11;  // pi/2 - kPio2Hi
inline constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                        kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                        kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
inline constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                        kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                        kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;
}  // namespace fdlibm

/// The noise field's pairs [begin, end), end - begin a multiple of 4: pair i
/// from index i's keyed hashes (keys k0, k1 and s0, s1), its cosine value
/// at out[2 (i - begin)], its sine value next. Call only where
/// avx2_available().
void noise_pairs_avx2(double* out, int64_t begin, int64_t end, uint32_t k0, uint32_t k1,
                      uint32_t s0, uint32_t s1);

/// One output row's source positions and where its voxels go: what the AVX2
/// loop needs of warp_view's host kernel. Positions are p_a = row[a] +
/// step[a] * i (+ B's columns times offsets(i) for Rand3DElastic).
template <class L>
struct WarpRow {
  const float* image = nullptr;  ///< source, channel c at image + c * image_channel_stride
  int64_t image_channels = 0, image_channel_stride = 0;
  int32_t stride[3] = {};  ///< the image's spatial strides; every offset fits int32
  double last[3] = {};     ///< n_a - 1, the source's last voxel per axis
  const L* label = nullptr;  ///< null: no label
  int64_t label_channels = 0, label_channel_stride = 0;
  int32_t label_stride[3] = {};
  float* image_out = nullptr;  ///< output voxel j of channel c at image_out[c * plane + j]
  L* label_out = nullptr;
  int64_t plane = 0;
  double B[3][3] = {};  ///< output voxel -> source position, linear part
  const float* offsets = nullptr;  ///< Rand3DElastic: 3 x plane, or null
};

/// Writes the voxels i in [0, count) of the row that starts at output voxel
/// `at` whose four-voxel group lies inside [0, n - 1) on every axis (every
/// padding mode reads the source there as it is), and lists the others in
/// `rest` (ascending) for the plain loop; returns how many it listed. Call only
/// where avx2_available().
template <class L>
int64_t warp_row_avx2(const WarpRow<L>& r, const double (&row)[3], int64_t at, int64_t count,
                      int64_t* rest);

}  // namespace volshard::detail
