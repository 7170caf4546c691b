// Spacing and resample beyond the MONAI goldens: slabs, the inverse used by
// predict, a grid that changes nothing, hand-computable values and errors.
#include "resample.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "volshard/transforms/transforms.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// An oblique, anisotropic voxel-to-world affine (20 degrees about z, 10 about x).
Affine oblique_affine(const std::array<double, 3>& spacing_mm) {
  const double degree = std::acos(-1.0) / 180.0, a = 20.0 * degree, b = 10.0 * degree;
  const double rz[3][3] = {
      {std::cos(a), -std::sin(a), 0}, {std::sin(a), std::cos(a), 0}, {0, 0, 1}};
  const double rx[3][3] = {
      {1, 0, 0}, {0, std::cos(b), -std::sin(b)}, {0, std::sin(b), std::cos(b)}};
  Affine m = identity_affine();
  for (size_t r = 0; r < 3; ++r) {
    for (size_t c = 0; c < 3; ++c) {
      double v = 0;
      for (size_t k = 0; k < 3; ++k) v += rz[r][k] * rx[k][c];
      m[r][c] = v * spacing_mm[c];
    }
  }
  m[0][3] = -10.0;
  m[1][3] = 5.0;
  m[2][3] = 2.0;
  return m;
}

Affine lps_affine() {
  Affine m = identity_affine();
  m[0][0] = -0.8;
  m[1][1] = -0.8;
  m[2][2] = 5.0;
  m[0][3] = 120.5;
  m[1][3] = -80.25;
  m[2][3] = 30.0;
  return m;
}

TEST(ResampleTest, SlabsGiveTheBitsOfOneAffineGridAndGridSamplerCall) {
  const at::Tensor data = at::randn({2, 23, 19, 17}) * 100;
  const SpatialImage image{data, oblique_affine({0.8, 0.9, 3.0})};
  const Grid grid = spacing_grid({23, 19, 17}, image.affine, {0.7, 0.6, 1.1});
  ASSERT_GT(grid.shape[0], 8);
  const at::Tensor theta = detail::resample_theta({23, 19, 17}, image.affine, grid);
  ASSERT_EQ(theta.sizes(), (at::IntArrayRef{1, 3, 4}));
  // What MONAI's AffineTransform does with theta: one grid, one call.
  const at::Tensor whole_grid = at::affine_grid_generator(
      theta, {1, 2, grid.shape[0], grid.shape[1], grid.shape[2]}, /*align_corners=*/false);
  const int64_t plane = grid.shape[1] * grid.shape[2];
  for (const Interpolation mode : {Interpolation::kBilinear, Interpolation::kNearest}) {
    const at::Tensor want =
        at::grid_sampler(data.to(at::kDouble).unsqueeze(0), whole_grid,
                         mode == Interpolation::kNearest ? 1 : 0, /*border=*/1, false)
            .squeeze(0)
            .to(at::kFloat);
    // One plane per slab, three (the last slab taking the rest), and the default.
    for (const int64_t slab : {int64_t{1}, 3 * plane, int64_t{0}}) {
      const SpatialImage got =
          slab == 0 ? resample(image, grid, mode)
                    : detail::resample_in_slabs(image, grid, mode, slab, /*separable=*/true);
      ASSERT_EQ(got.data.sizes(), want.sizes());
      EXPECT_TRUE(at::equal(got.data, want)) << "slab " << slab;
      EXPECT_EQ(got.affine, grid.affine);
    }
  }
}

// Spacing of any orientation (LPS, axes permuted), any spacing up or down,
// odd sizes and one-voxel axes: the grid maps axes to axes, and the per-axis
// tables give every bit affine_grid and grid_sampler give (float32 and int16
// inputs, trilinear and nearest, any slab size), with NaN and infinities too.
TEST(ResampleTest, PerAxisTablesGiveTheBitsOfAffineGridAndGridSamplerWhereAxesMapToAxes) {
  at::manual_seed(11);
  const std::vector<Affine> affines = [] {
    std::vector<Affine> a{identity_affine(), lps_affine()};
    Affine permuted{};  // voxel axis 0 along world y, 1 along z, 2 along x (PSR-like)
    permuted[1][0] = -1.2;
    permuted[2][1] = 0.7;
    permuted[0][2] = 3.0;
    permuted[0][3] = 5.0;
    permuted[3][3] = 1.0;
    a.push_back(permuted);
    return a;
  }();
  const std::vector<std::array<int64_t, 3>> shapes{{23, 19, 6}, {1, 17, 9}, {8, 1, 1}, {31, 4, 13}};
  const std::vector<std::array<double, 3>> spacings{
      {1.5, 1.5, 2.0}, {0.31, 0.5, 0.77}, {2.9, 0.4, 7.0}};
  int64_t compared = 0;
  for (const Affine& affine : affines) {
    for (const auto& shape : shapes) {
      for (const auto& pixdim : spacings) {
        for (const bool short_ints : {false, true}) {
          at::Tensor data = at::randn({2, shape[0], shape[1], shape[2]}) * 300;
          if (short_ints) data = data.to(at::kShort);
          if (!short_ints && shape[0] > 8) {
            data[0][3][0][0] = std::nanf("");
            data[1][2][1][0] = INFINITY;
          }
          const SpatialImage image{data, affine};
          const Grid grid = spacing_grid(shape, image.affine, pixdim);
          ASSERT_TRUE(detail::maps_axes_to_axes(detail::resample_theta(shape, affine, grid)))
              << "Spacing's grid takes the tables";
          for (const Interpolation mode : {Interpolation::kBilinear, Interpolation::kNearest}) {
            const SpatialImage want = detail::resample_in_slabs(image, grid, mode, 0, false);
            for (const int64_t slab : {int64_t{1}, int64_t{1} << 16}) {
              const SpatialImage got = detail::resample_in_slabs(image, grid, mode, slab, true);
              ASSERT_EQ(got.data.sizes(), want.data.sizes());
              // Bit for bit, NaN included: compare the float32 patterns.
              ASSERT_TRUE(at::equal(got.data.view(at::kInt), want.data.view(at::kInt)))
                  << "shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << " pixdim "
                  << pixdim[0] << "," << pixdim[1] << "," << pixdim[2]
                  << (short_ints ? " int16" : " float32")
                  << (mode == Interpolation::kNearest ? " nearest" : " trilinear") << ", "
                  << (got.data.view(at::kInt) != want.data.view(at::kInt)).sum().item<int64_t>()
                  << " voxels differ";
              EXPECT_EQ(got.affine, want.affine);
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 4 * 3 * 2 * 2 * 2);
  // An oblique affine's Spacing: the solve leaves rounding off the diagonal,
  // so it takes affine_grid and grid_sampler (MONAI's own path), as does a
  // grid of other directions.
  const Affine oblique = oblique_affine({0.8, 0.9, 3.0});
  EXPECT_FALSE(detail::maps_axes_to_axes(detail::resample_theta(
      {23, 19, 17}, oblique, spacing_grid({23, 19, 17}, oblique, {0.7, 0.6, 1.1}))));
  EXPECT_FALSE(detail::maps_axes_to_axes(
      detail::resample_theta({23, 19, 17}, oblique, Grid{{20, 20, 20}, identity_affine()})));
}

TEST(ResampleTest, ResamplingBackOntoTheOriginalGridGivesItsShapeAndAffine) {
  const at::Tensor label = at::randint(0, 4, {1, 9, 7, 5}).to(at::kFloat);
  for (const Affine& affine : {lps_affine(), oblique_affine({0.8, 0.9, 3.0})}) {
    const SpatialImage image{label, affine};
    const SpatialImage moved = spacing(image, {1.5, 1.5, 2.0}, Interpolation::kNearest);
    ASSERT_NE(moved.data.sizes(), label.sizes());
    const SpatialImage back = resample(moved, Grid{{9, 7, 5}, affine}, Interpolation::kNearest);
    EXPECT_EQ(back.data.sizes(), label.sizes());
    EXPECT_EQ(back.affine, affine);
    // Nearest neighbours only copy: every value is one of the labels.
    EXPECT_TRUE(at::equal(back.data, back.data.round().clamp(0, 3)));
  }
}

TEST(ResampleTest, HalvingTheSpacingAndResamplingBackRestoresNearestLabelsExactly) {
  // Every original voxel centre is a voxel centre of the finer grid.
  const at::Tensor label = at::randint(0, 5, {1, 9, 7, 5}).to(at::kFloat);
  const SpatialImage image{label, lps_affine()};
  const SpatialImage fine = spacing(image, {0.4, 0.4, 2.5}, Interpolation::kNearest);
  EXPECT_EQ(fine.data.sizes(), (at::IntArrayRef{1, 17, 13, 9}));
  const SpatialImage back = resample(fine, Grid{{9, 7, 5}, image.affine}, Interpolation::kNearest);
  EXPECT_TRUE(at::equal(back.data, label));
  EXPECT_EQ(back.affine, image.affine);
}

TEST(ResampleTest, TheImagesOwnGridWithinMonaisToleranceReturnsTheDataAndItsAffine) {
  const at::Tensor data = at::randn({1, 6, 5, 4});
  const SpatialImage image{data, lps_affine()};
  Affine nudged = image.affine;
  nudged[0][3] += 5e-4;  // within MONAI's AFFINE_TOL of 1e-3: not resampled
  for (const Affine& a : {image.affine, nudged}) {
    const SpatialImage out = resample(image, Grid{{6, 5, 4}, a}, Interpolation::kBilinear);
    EXPECT_TRUE(at::equal(out.data, data));
    EXPECT_EQ(out.affine, image.affine);
  }
  nudged[0][3] += 0.5;
  const SpatialImage moved = resample(image, Grid{{6, 5, 4}, nudged}, Interpolation::kBilinear);
  EXPECT_FALSE(at::equal(moved.data, data));
  EXPECT_EQ(moved.affine, nudged);
  // The spacing the image already has (within 1e-3) changes nothing either.
  const SpatialImage same = spacing(image, {0.8, 0.8, 5.0005}, Interpolation::kBilinear);
  EXPECT_TRUE(at::equal(same.data, data));
  EXPECT_EQ(same.affine, image.affine);
}

TEST(SpacingTest, ALinearRampIsSampledAtTheNewVoxelCentres) {
  // value = 3 * i along the first axis, identity affine, 2 mm along it: new
  // voxel j lies at i = 2 j; 11 voxels span 10 mm, so 6 new ones.
  const at::Tensor ramp =
      (at::arange(11, at::kFloat) * 3).reshape({1, 11, 1, 1}).expand({1, 11, 4, 3}).contiguous();
  const SpatialImage image{ramp, identity_affine()};
  const SpatialImage out = spacing(image, {2.0, 1.0, 1.0}, Interpolation::kBilinear);
  ASSERT_EQ(out.data.sizes(), (at::IntArrayRef{1, 6, 4, 3}));
  const at::Tensor want =
      (at::arange(6, at::kFloat) * 6).reshape({1, 6, 1, 1}).expand({1, 6, 4, 3});
  EXPECT_TRUE(at::allclose(out.data, want, 0.0, 1e-5));
  EXPECT_DOUBLE_EQ(out.affine[0][0], 2.0);
  EXPECT_DOUBLE_EQ(out.affine[1][1], 1.0);
  // 1.5 mm: 10 / 1.5 + 1 = 7.67 rounds to 8 voxels, the last past the input,
  // which takes the border value.
  const SpatialImage coarse = spacing(image, {1.5, 1.0, 1.0}, Interpolation::kBilinear);
  ASSERT_EQ(coarse.data.size(1), 8);
  EXPECT_NEAR(coarse.data[0][3][0][0].item<float>(), 13.5f, 1e-5);
  EXPECT_EQ(coarse.data[0][7][0][0].item<float>(), 30.0f);
}

TEST(SpacingTest, BadPixdimAndSingularAffinesAreNamed) {
  const SpatialImage image{at::zeros({1, 4, 4, 4}), identity_affine()};
  EXPECT_THAT(
      [&] {
        spacing(image, {1.0, 0.0, 1.0}, Interpolation::kNearest);
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("pixdim[1]=0")));
  EXPECT_THAT(
      [&] {
        spacing(image, {-1.5, 1.0, 1.0}, Interpolation::kNearest);
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("pixdim[0]=-1.5")));
  EXPECT_THAT(
      [&] {
        spacing(image, {1.0, 1.0, NAN}, Interpolation::kNearest);
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("pixdim[2]=nan")));
  Affine flat = identity_affine();
  flat[2][2] = 0.0;  // the third voxel axis has no extent
  EXPECT_THAT(
      [&] {
        spacing_grid({4, 4, 4}, flat, {1.0, 1.0, 1.0});
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("singular")));
  EXPECT_THAT(
      [&] {
        resample({image.data, flat}, Grid{{4, 4, 4}, identity_affine()}, Interpolation::kNearest);
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("singular")));
  EXPECT_THAT(
      [&] {
        resample(image, Grid{{4, 0, 4}, identity_affine()}, Interpolation::kNearest);
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("(4, 0, 4)")));
}

}  // namespace
}  // namespace volshard
