// RandAffine's two host loops (warp.h): the AVX2 one, four voxels at a time,
// gives the plain loop's bits for every padding mode, label dtype, channel
// count, stride and offset field, near the edges and away from them.
#include "simd.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "volshard/core/seed_streams.h"
#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

using detail::HostLoop;

// Two image channels whose values vary at every voxel, and a label of
// `label_type` with three classes, over `shape`; `transposed` stores both
// with axes 0 and 2 swapped in memory (strides not C order).
Sample varied_sample(const std::array<int64_t, 3>& shape, at::ScalarType label_type,
                     bool transposed) {
  const int64_t n = shape[0] * shape[1] * shape[2];
  const at::Tensor base = at::arange(n, at::kFloat).reshape({1, shape[0], shape[1], shape[2]});
  Sample s;
  s.image = at::cat({base.sin() * 100.0f, (base * 0.37f).cos() * 7.0f + 3.0f}, 0);
  s.label = at::remainder(at::floor(base / 5.0f), 3.0f).to(label_type);
  if (transposed) {
    s.image = s.image.transpose(1, 3).contiguous().transpose(1, 3);
    s.label = s.label.transpose(1, 3).contiguous().transpose(1, 3);
  }
  return s;
}

void expect_same_bits(const Sample& in, const Matrix4& m, PaddingMode padding,
                      const at::Tensor& offsets, const std::string& what) {
  const Sample fast = detail::warp_view(in, m, padding, Gather::kAuto, offsets, HostLoop::kAuto);
  const Sample plain =
      detail::warp_view(in, m, padding, Gather::kAuto, offsets, HostLoop::kScalar);
  ASSERT_EQ(fast.image.sizes(), plain.image.sizes()) << what;
  EXPECT_TRUE(at::equal(fast.image, plain.image))
      << what << ": largest difference "
      << (fast.image - plain.image).abs().max().item<double>();
  EXPECT_TRUE(at::equal(fast.label, plain.label))
      << what << ": " << fast.label.ne(plain.label).sum().item<int64_t>() << " labels differ";
}

TEST(WarpLoopTest, ThisBuildHasTheAvx2LoopWhereTheCpuHasAvx2) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  EXPECT_EQ(detail::avx2_available(), __builtin_cpu_supports("avx2") != 0);
#else
  EXPECT_FALSE(detail::avx2_available());
#endif
}

// Random RandAffine and RandZoom draws, crops at every distance from the
// volume's edges (so that groups of four straddle them and go to the plain
// loop), rows of 5, 7 and 13 voxels (groups and tails), flips.
TEST(WarpLoopTest, TheAvx2LoopGivesThePlainLoopsBitsForRandomAffines) {
  if (!detail::avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 loop";
  AffineOptions o;
  o.prob = 1;
  o.rotate = {0.6, 0.6, 0.6};
  o.shear = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1};
  o.translate = {3, 3, 3};
  o.scale = {0.3, 0.3, 0.3};
  o.zoom_prob = 0.5;
  o.zoom = {0.6, 1.6};
  const std::array<int64_t, 3> shape{24, 22, 26};
  for (const at::ScalarType label_type : {at::kByte, at::kFloat}) {
    for (const bool transposed : {false, true}) {
      const Sample s = varied_sample(shape, label_type, transposed);
      for (uint64_t seed = 0; seed < 12; ++seed) {
        StreamRng rng(seed);
        const Matrix4 m = affine_matrix(sample_affine(o, rng));
        const int64_t row = std::array<int64_t, 3>{5, 7, 13}[seed % 3];
        Sample crop = s;
        crop.view = SpatialMap::identity(shape)
                        .cropped({static_cast<int64_t>(seed), 3, 26 - row - static_cast<int64_t>(seed % 7)}, {9, 8, row})
                        .flipped(seed % 3);
        for (const PaddingMode padding :
             {PaddingMode::kZeros, PaddingMode::kBorder, PaddingMode::kReflection}) {
          expect_same_bits(crop, m, padding, {},
                           "seed " + std::to_string(seed) + ", padding " +
                               std::to_string(static_cast<int>(padding)) + ", label " +
                               c10::toString(label_type) + (transposed ? ", transposed" : ""));
        }
      }
    }
  }
}

// Half-voxel shifts put every position on a tie, which the label's nearest
// neighbour breaks to the even voxel, as grid_sample's nearbyint does.
TEST(WarpLoopTest, TheAvx2LoopBreaksTheLabelsHalfVoxelTiesAsThePlainLoop) {
  if (!detail::avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 loop";
  const std::array<int64_t, 3> shape{16, 15, 18};
  const Sample s = varied_sample(shape, at::kByte, false);
  for (const double half : {0.5, -0.5, 1.5}) {
    AffineParams p;
    p.apply = true;
    p.translate = {half, -half, half};
    Sample crop = s;
    crop.view = SpatialMap::identity(shape).cropped({3, 3, 2}, {8, 8, 12});
    expect_same_bits(crop, affine_matrix(p), PaddingMode::kZeros, {},
                     "shift " + std::to_string(half));
    const Sample fast = detail::warp_view(crop, affine_matrix(p), PaddingMode::kZeros,
                                          Gather::kAuto, {}, HostLoop::kAuto);
    // Along the last axis, output voxel j reads the tie between crop voxels
    // j + half -/+ 0.5: the even one of the two source voxels.
    const int64_t first = 2 + static_cast<int64_t>(std::floor(half));  // source voxel of j = 0's lower
    const int64_t even = first % 2 == 0 ? first : first + 1;
    const int64_t lower0 = 3 + static_cast<int64_t>(std::floor(half)),
                  lower1 = 3 + static_cast<int64_t>(std::floor(-half));
    const int64_t k0 = lower0 % 2 == 0 ? lower0 : lower0 + 1,
                  k1 = lower1 % 2 == 0 ? lower1 : lower1 + 1;
    EXPECT_EQ(fast.label[0][0][0][0].item<int64_t>(), s.label[0][k0][k1][even].item<int64_t>())
        << "shift " << half;
  }
}

// Rand3DElastic: each voxel's offsets enter its position before the map.
TEST(WarpLoopTest, TheAvx2LoopGivesThePlainLoopsBitsWithElasticOffsets) {
  if (!detail::avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 loop";
  AffineOptions o;
  o.elastic_prob = 1;
  o.rotate = {0.3, 0.2, 0.1};
  o.scale = {0.1, 0.1, 0.1};
  const std::array<int64_t, 3> shape{20, 18, 21};
  const Sample s = varied_sample(shape, at::kByte, false);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    StreamRng rng(seed);
    const Matrix4 m = affine_matrix(sample_affine(o, rng));
    Sample crop = s;
    crop.view = SpatialMap::identity(shape).cropped({3, 2, static_cast<int64_t>(seed)}, {9, 8, 11});
    const at::Tensor offsets = elastic_offsets(
        uniform_field({3, 9, 8, 11}, seed, c10::Device(c10::kCPU)), 1.5, 4.0 + seed);
    for (const PaddingMode padding : {PaddingMode::kZeros, PaddingMode::kReflection}) {
      expect_same_bits(crop, m, padding, offsets, "seed " + std::to_string(seed));
    }
  }
}

// Fields of every length around the groups of four pairs and the threads'
// chunks (2^14 pairs), odd lengths (a last pair with one value) included.
TEST(NoiseLoopTest, TheAvx2LoopGivesThePlainLoopsFieldBitForBit) {
  if (!detail::avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 loop";
  for (const uint64_t key : {uint64_t{0}, uint64_t{42}, ~uint64_t{0} - 12345}) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{17},
                            int64_t{(1 << 15) + 5}, int64_t{(1 << 18) + 3}}) {
      const at::Tensor fast = detail::gaussian_noise_field({n}, key, HostLoop::kAuto);
      const at::Tensor plain = detail::gaussian_noise_field({n}, key, HostLoop::kScalar);
      EXPECT_TRUE(at::equal(fast, plain))
          << "key " << key << ", n " << n << ": " << fast.ne(plain).sum().item<int64_t>()
          << " values differ, largest by " << (fast - plain).abs().max().item<double>();
    }
  }
}

// The field's bits are float64 operations alone (fdlibm's log, sin and cos,
// not libm's): these values are the same on every CPU, with or without AVX2.
// (Python's math.log, cos and sin on the same hashes give them within 3e-16:
// -1.0420718435401906, -0.9345955952419451, 1.4194719081459064,
// 0.4162669636883727, 0.7643689046840788, 0.9761065302949298.)
TEST(NoiseLoopTest, TheFieldsValuesArePinned) {
  for (const HostLoop loop : {HostLoop::kScalar, HostLoop::kAuto}) {
    const at::Tensor z = detail::gaussian_noise_field({8}, 42, loop);  // four pairs: one AVX2 group
    const double pinned[6] = {-0x1.0ac5386816697p+0, -0x1.de83505919806p-1, 0x1.6b6282cf13cf7p+0,
                              0x1.aa41e30dc980cp-2,  0x1.875b5c6f65197p-1,  0x1.f3c43c320eb93p-1};
    for (int64_t k = 0; k < 6; ++k)
      EXPECT_EQ(z[k].item<double>(), pinned[k]) << "value " << k;
  }
}

// RandGaussianSmooth's three passes: shapes thinner than the kernel, rows
// that are not a multiple of eight, one and three channels, both truncations
// (Rand3DElastic's 3, RandGaussianSmooth's 4), a zero sigma (one tap).
TEST(SmoothLoopTest, TheAvx2PassesGiveThePlainPassesBitsForBit) {
  if (!detail::avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 loop";
  const struct {
    std::vector<int64_t> shape;
    std::array<double, 3> sigma;
    double truncated;
  } cases[] = {{{1, 19, 23, 37}, {1.0, 0.5, 1.5}, 4.0}, {{3, 5, 2, 1}, {2.0, 0.0, 0.25}, 4.0},
               {{3, 21, 17, 29}, {6.5, 5.0, 7.9}, 3.0}, {{1, 8, 16, 64}, {0.0, 3.0, 2.0}, 4.0},
               {{2, 3, 40, 9}, {1.2, 8.0, 0.7}, 3.0}};
  for (const auto& c : cases) {
    int64_t n = 1;
    for (const int64_t d : c.shape) n *= d;
    const at::Tensor image = (at::arange(n, at::kFloat) * 0.37f).sin().reshape(c.shape) * 50.0f;
    const at::Tensor fast = detail::gaussian_smooth(image, c.sigma, c.truncated, HostLoop::kAuto);
    const at::Tensor plain =
        detail::gaussian_smooth(image, c.sigma, c.truncated, HostLoop::kScalar);
    EXPECT_TRUE(at::equal(fast, plain))
        << c.shape << ": " << fast.ne(plain).sum().item<int64_t>() << " values differ, largest by "
        << (fast - plain).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace volshard
