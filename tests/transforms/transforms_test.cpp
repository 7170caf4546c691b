#include "volshard/transforms/transforms.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "transforms/augmentation_test_util.h"
#include "volshard/core/log.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

// A label with a foreground box [lo, hi) in each axis.
Sample box_sample(std::array<int64_t, 3> shape, std::array<int64_t, 3> lo,
                  std::array<int64_t, 3> hi) {
  Sample s;
  s.image = at::arange(shape[0] * shape[1] * shape[2], at::kFloat)
                .reshape({1, shape[0], shape[1], shape[2]});
  s.label = at::zeros({1, shape[0], shape[1], shape[2]}, at::kFloat);
  s.label.slice(1, lo[0], hi[0]).slice(2, lo[1], hi[1]).slice(3, lo[2], hi[2]).fill_(1.0);
  return s;
}

// Every background voxel, listed or not, in C order.
std::vector<int32_t> background_of(const LabelIndices& idx) {
  std::vector<int32_t> out;
  for (int64_t k = 0; k < idx.background_count(); ++k) out.push_back(idx.background_at(k));
  return out;
}

double chi_square_quantile_999(double dof) {  // Wilson-Hilferty, z = 3.0902
  const double z = 3.0902, t = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - t + z * std::sqrt(t), 3.0);
}

TEST(ScaleIntensityTest, RescalesGloballyToZeroOne) {
  const at::Tensor x = at::tensor({2.0f, 4.0f, 6.0f, 10.0f}).reshape({2, 1, 1, 2});
  const at::Tensor y = scale_intensity(x);
  EXPECT_TRUE(at::equal(y, at::tensor({0.0f, 0.25f, 0.5f, 1.0f}).reshape({2, 1, 1, 2})));
  EXPECT_TRUE(at::allclose(scale_intensity(x, {-1.0, 1.0}), y * 2 - 1));
}

TEST(ScaleIntensityTest, FusedLoopEqualsTheTensorFormulaBitForBit) {
  const at::Tensor x = at::randn({2, 7, 6, 5}) * 37.5 + 3;
  const at::Tensor strided = x.transpose(1, 3);  // not contiguous: ATen's tensor ops
  for (const ScaleIntensityOptions o :
       {ScaleIntensityOptions{}, ScaleIntensityOptions{-1.0, 2.5}}) {
    EXPECT_TRUE(at::equal(scale_intensity(x, o), scale_intensity(strided, o).transpose(1, 3)));
  }
}

TEST(ScaleIntensityRangeTest, OnePassEqualsTorchsStepByStepArithmeticBitForBit) {
  // MONAI's ScaleIntensityRange as torch runs it, one ATen op a step.
  const auto torch_steps = [](const at::Tensor& x, const ScaleIntensityRangeOptions& o) {
    at::Tensor y = (x - o.a_min) / (o.a_max - o.a_min);
    y = y * (o.b_max - o.b_min) + o.b_min;
    return o.clip ? at::clamp(y, o.b_min, o.b_max) : y;
  };
  at::manual_seed(7);
  at::Tensor x = at::randn({1, 61, 47, 23}) * 700 - 200;  // CT-like values around the window
  auto flat = x.view({-1});
  flat[0] = std::numeric_limits<float>::quiet_NaN();
  flat[1] = std::numeric_limits<float>::infinity();
  flat[2] = -std::numeric_limits<float>::infinity();
  flat[3] = -57.0f;
  flat[4] = 164.0f;
  for (const ScaleIntensityRangeOptions o :
       {ScaleIntensityRangeOptions{-57, 164, 0, 1, true},
        ScaleIntensityRangeOptions{-57, 164, 0, 1, false},
        ScaleIntensityRangeOptions{-1000, 1000, -1, 1, true},
        ScaleIntensityRangeOptions{0.1, 0.7, 0.3, 0.2,
                                   true},  // b_min > b_max: at::clamp gives b_max
        ScaleIntensityRangeOptions{-125.5, 275.25, 0.0, 255.0, true}}) {
    const at::Tensor got = scale_intensity_range(x, o), want = torch_steps(x, o);
    EXPECT_TRUE(at::equal(got.isnan(), want.isnan()));
    EXPECT_TRUE(at::equal(at::nan_to_num(got, 7.0), at::nan_to_num(want, 7.0)))
        << o.a_min << " " << o.a_max << " " << o.b_min << " " << o.b_max << " " << o.clip;
  }
}

TEST(ScaleIntensityTest, ConstantImageBecomesZerosAndNanPropagates) {
  EXPECT_TRUE(at::equal(scale_intensity(at::full({1, 2, 2, 2}, 7.0f)), at::zeros({1, 2, 2, 2})));
  at::Tensor x = at::rand({1, 2, 2, 2});
  x.view(-1)[3] = NAN;
  EXPECT_TRUE(at::isnan(scale_intensity(x)).all().item<bool>());
}

TEST(LabelIndicesTest, AreCOrderFlatIndicesOfForegroundAndBackground) {
  const Sample s = box_sample({4, 5, 6}, {1, 2, 3}, {3, 4, 5});
  const LabelIndices idx = label_indices(s.label);
  const at::Tensor fg = at::nonzero(s.label[0].reshape(-1) != 0).reshape(-1);
  const at::Tensor bg = at::nonzero(s.label[0].reshape(-1) == 0).reshape(-1);
  ASSERT_EQ(static_cast<int64_t>(idx.foreground.size()), fg.numel());
  ASSERT_EQ(idx.background_count(), bg.numel());
  EXPECT_TRUE(idx.background.empty()) << "the background is the complement, not listed";
  for (int64_t k = 0; k < fg.numel(); ++k)
    EXPECT_EQ(idx.foreground[static_cast<size_t>(k)], fg[k].item<int64_t>());
  for (int64_t k = 0; k < bg.numel(); ++k) EXPECT_EQ(idx.background_at(k), bg[k].item<int64_t>());
  EXPECT_EQ(idx.foreground.front(), (1 * 5 + 2) * 6 + 3);
  EXPECT_THROW(idx.background_at(bg.numel()), std::out_of_range);
  EXPECT_THROW(idx.background_at(-1), std::out_of_range);
}

TEST(LabelIndicesTest, DropsChannelZeroOfOneHotLabelsAndCanThresholdTheImage) {
  at::Tensor onehot = at::zeros({2, 2, 2, 2});
  onehot[0].fill_(1.0);  // background channel: not foreground
  onehot[1][1][1][1] = 1.0;
  const auto idx = label_indices(onehot);
  EXPECT_EQ(idx.foreground, std::vector<int32_t>{7});
  at::Tensor image = at::zeros({1, 2, 2, 2});
  image.view(-1)[2] = 5.0;
  const auto thresholded = label_indices(onehot, &image, 1.0);
  EXPECT_EQ(thresholded.background, std::vector<int32_t>{2});
  EXPECT_EQ(thresholded.background_count(), 1);
  EXPECT_EQ(thresholded.background_at(0), 2);
}

TEST(RandCropByPosNegLabelTest, ClampsCentresAsMonai) {
  // L = 128, s = 96: centre in [48, 80], start in [0, 32].
  EXPECT_EQ(clamp_crop_centre(0, 96, 128), 48);
  EXPECT_EQ(clamp_crop_centre(127, 96, 128), 80);
  EXPECT_EQ(clamp_crop_centre(60, 96, 128), 60);
  // odd size: lo = 2, hi = trunc(10 + 1 - 2.5) = 8
  EXPECT_EQ(clamp_crop_centre(9, 5, 10), 7);
  // crop as large as the image: lo = hi = 5 -> hi = 6, centre 5
  EXPECT_EQ(clamp_crop_centre(0, 10, 10), 5);
}

TEST(RandCropByPosNegLabelTest, CropsAreInsideOfTheRequestedSizeAndCopyTheRightVoxels) {
  const Sample s = box_sample({20, 18, 16}, {2, 3, 4}, {6, 7, 8});
  const LabelIndices idx = label_indices(s.label);
  PosNegCropOptions o;
  o.spatial_size = {8, 6, 5};
  o.num_samples = 4;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    StreamRng rng(seed);
    for (const CropParams& c : sample_pos_neg_crops({20, 18, 16}, idx, o, rng)) {
      const std::array<int64_t, 3> shape{20, 18, 16};
      for (size_t a = 0; a < 3; ++a) {
        ASSERT_GE(c.start[a], 0);
        ASSERT_LE(c.start[a] + c.size[a], shape[a]);
        ASSERT_EQ(c.size[a], o.spatial_size[a]);
      }
      const Sample patch = apply_crop(s, c, 1);
      ASSERT_EQ(patch.image.sizes(), (std::vector<int64_t>{1, 8, 6, 5}));
      // the image holds its own flat index: the crop's first voxel names its start
      EXPECT_EQ(patch.image[0][0][0][0].item<float>(),
                static_cast<float>((c.start[0] * 18 + c.start[1]) * 16 + c.start[2]));
      EXPECT_EQ(patch.meta.crop_start, c.start);
      EXPECT_EQ(patch.meta.patch_index, 1);
      if (c.foreground) {  // the drawn voxel (before clamping) is foreground
        EXPECT_EQ(s.label[0][c.voxel[0]][c.voxel[1]][c.voxel[2]].item<float>(), 1.0f);
      } else {
        EXPECT_EQ(s.label[0][c.voxel[0]][c.voxel[1]][c.voxel[2]].item<float>(), 0.0f);
      }
    }
  }
}

TEST(RandCropByPosNegLabelTest, ForegroundFrequencyFollowsPosOverPosPlusNeg) {
  const Sample s = box_sample({12, 12, 12}, {3, 3, 3}, {6, 6, 6});
  const LabelIndices idx = label_indices(s.label);
  for (const auto& [pos, neg] : std::vector<std::pair<double, double>>{{1, 1}, {3, 1}, {1, 4}}) {
    PosNegCropOptions o;
    o.spatial_size = {4, 4, 4};
    o.pos = pos;
    o.neg = neg;
    o.num_samples = 20000;
    StreamRng rng(42);
    int64_t fg = 0;
    for (const auto& c : sample_pos_neg_crops({12, 12, 12}, idx, o, rng))
      fg += c.foreground ? 1 : 0;
    const double p = pos / (pos + neg), n = 20000;
    const double z = (static_cast<double>(fg) - n * p) / std::sqrt(n * p * (1 - p));
    EXPECT_LT(std::abs(z), 4.0) << "pos=" << pos << " neg=" << neg
                                << " fg=" << fg;  // binomial test
  }
}

TEST(RandCropByPosNegLabelTest, ClampedStartsFollowTheDistributionTheLabelImplies) {
  // Expected: each class with probability 1/2, a uniform voxel of it, clamped.
  const std::array<int64_t, 3> shape{9, 8, 7};
  Sample s = box_sample(shape, {0, 1, 4}, {3, 4, 7});  // a corner box: clamping matters
  const LabelIndices idx = label_indices(s.label);
  const std::array<int64_t, 3> size{4, 3, 5};
  std::map<std::array<int64_t, 3>, double> expected;
  const auto add_class = [&](const std::vector<int32_t>& pool) {
    for (int32_t flat : pool) {
      const std::array<int64_t, 3> v{flat / (shape[1] * shape[2]), (flat / shape[2]) % shape[1],
                                     flat % shape[2]};
      std::array<int64_t, 3> start{};
      for (size_t a = 0; a < 3; ++a)
        start[a] = clamp_crop_centre(v[a], size[a], shape[a]) - size[a] / 2;
      expected[start] += 0.5 / static_cast<double>(pool.size());
    }
  };
  add_class(idx.foreground);
  add_class(background_of(idx));
  PosNegCropOptions o;
  o.spatial_size = size;
  o.num_samples = 100000;
  StreamRng rng(7);
  std::map<std::array<int64_t, 3>, double> observed;
  for (const auto& c : sample_pos_neg_crops(shape, idx, o, rng)) observed[c.start] += 1;
  double chi2 = 0;
  for (const auto& [start, p] : expected) {
    const double e = p * static_cast<double>(o.num_samples);
    chi2 += (observed[start] - e) * (observed[start] - e) / e;
  }
  for (const auto& [start, count] : observed)
    ASSERT_TRUE(expected.count(start)) << "impossible start";
  const double dof = static_cast<double>(expected.size()) - 1;
  EXPECT_LT(chi2, chi_square_quantile_999(dof)) << "cells=" << expected.size();
}

TEST(RandCropByPosNegLabelTest, SameSeedSameCropsAndDifferentSeedsDiffer) {
  const Sample s = box_sample({30, 30, 30}, {5, 5, 5}, {20, 20, 20});
  const Compose pipeline = test_augmentation({16, 16, 16}, 4);
  const auto a = pipeline(s, 1234), b = pipeline(s, 1234), c = pipeline(s, 1235);
  ASSERT_EQ(a.size(), 4u);
  bool differs = false;
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_TRUE(at::equal(a[k].image, b[k].image));
    EXPECT_TRUE(at::equal(a[k].label, b[k].label));
    EXPECT_EQ(a[k].meta.crop_start, b[k].meta.crop_start);
    differs |= a[k].meta.crop_start != c[k].meta.crop_start;
  }
  EXPECT_TRUE(differs);
}

TEST(RandCropByPosNegLabelTest, WarnsOnceWithoutForegroundAndFailsWithoutAnyVoxel) {
  std::vector<std::string> warnings;
  const auto previous = set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  Sample s = box_sample({10, 10, 10}, {0, 0, 0}, {0, 0, 0});  // no foreground
  PosNegCropOptions o;
  o.spatial_size = {4, 4, 4};
  o.num_samples = 3;
  const auto crop = make_rand_crop_by_pos_neg_label(o);
  StreamRng rng(1);
  for (int k = 0; k < 3; ++k) {
    for (const auto& patch : (*crop)(s, rng)) EXPECT_FALSE(patch.meta.foreground_centre);
  }
  set_warning_handler(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("0 foreground and 1000 background"));
  EXPECT_THAT(warnings[0], HasSubstr("pos_ratio to 0"));
  StreamRng again(1);
  EXPECT_THROW(sample_pos_neg_crops({10, 10, 10}, LabelIndices{}, o, again), std::invalid_argument);
}

TEST(RandCropByPosNegLabelTest, RejectsACropLargerThanTheImageUnlessAllowSmaller) {
  const Sample s = box_sample({10, 12, 14}, {1, 1, 1}, {5, 5, 5});
  PosNegCropOptions o;
  o.spatial_size = {16, 8, 8};
  StreamRng rng(0);
  try {
    sample_pos_neg_crops({10, 12, 14}, label_indices(s.label), o, rng);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("(16, 8, 8) is larger than the image (10, 12, 14)"));
    EXPECT_THAT(e.what(), HasSubstr("--allow-smaller"));  // as the command line spells it
  }
  o.allow_smaller = true;
  const auto crops = sample_pos_neg_crops({10, 12, 14}, label_indices(s.label), o, rng);
  EXPECT_EQ(crops[0].size, (std::array<int64_t, 3>{10, 8, 8}));
  o.pos = -1;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(RandRotate90Test, FourQuarterTurnsAreIdentityAndOneIsFlipThenTranspose) {
  Sample s = box_sample({5, 6, 7}, {1, 1, 1}, {3, 3, 3});
  s.image = s.image.reshape({1, 5, 6, 7}).expand({1, 5, 6, 7}).contiguous();
  Rotate90Options o;
  o.spatial_axes = {0, 2};
  Sample r = s;
  for (int k = 0; k < 4; ++k) r = apply_rotate90(r, {1, true}, o);
  EXPECT_TRUE(at::equal(r.image, s.image));
  // semantics.md: k=1 over dims (1,3) == flip(3) then transpose(1,3)
  const Sample one = apply_rotate90(s, {1, true}, o);
  EXPECT_TRUE(at::equal(one.image, s.image.flip({3}).transpose(1, 3)));
  EXPECT_TRUE(at::equal(apply_rotate90(s, {3, true}, o).image, s.image.transpose(1, 3).flip({3})));
  EXPECT_TRUE(at::equal(apply_rotate90(s, {2, true}, o).image, s.image.flip({1}).flip({3})));
  EXPECT_EQ(one.meta.rot90_k, 1);
  EXPECT_TRUE(at::equal(apply_rotate90(s, {2, false}, o).image, s.image));
}

TEST(RandRotate90Test, DrawsKUniformlyAndAppliesWithProbability) {
  Rotate90Options o;
  o.prob = 0.5;
  StreamRng rng(9);
  std::map<std::pair<int64_t, bool>, int> counts;
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    const auto p = sample_rotate90(o, rng);
    ++counts[{p.k, p.apply}];
  }
  for (int64_t k = 1; k <= 3; ++k) {
    for (bool apply : {false, true}) {
      const double expected = n / 6.0;
      const int observed = counts[std::make_pair(k, apply)];
      EXPECT_NEAR(observed, expected, 5 * std::sqrt(expected)) << k << apply;
    }
  }
}

TEST(RandFlipTest, FlipsTheChosenAxesOfImageAndLabel) {
  const Sample s = box_sample({3, 4, 5}, {0, 0, 0}, {1, 2, 3});
  FlipOptions o;
  o.prob = 1.0;
  o.spatial_axes = {1};
  const Sample f = apply_flip(s, true, o);
  EXPECT_TRUE(at::equal(f.image, s.image.flip({2})));
  EXPECT_TRUE(at::equal(f.label, s.label.flip({2})));
  EXPECT_EQ(f.meta.flipped, (std::array<bool, 3>{false, true, false}));
  o.spatial_axes = {3};
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(ComposeTest, EachStepHasItsOwnStreamSoLaterStepsDoNotChangeEarlierDraws) {
  const Sample s = box_sample({30, 30, 30}, {5, 5, 5}, {20, 20, 20});
  PosNegCropOptions c;
  c.spatial_size = {8, 8, 8};
  c.num_samples = 2;
  const Compose crop_only({make_rand_crop_by_pos_neg_label(c)});
  FlipOptions f;
  f.prob = 0.5;
  const Compose crop_then_flip({make_rand_crop_by_pos_neg_label(c), make_rand_flip(f)});
  const auto a = crop_only(s, 77), b = crop_then_flip(s, 77);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].meta.crop_start, b[k].meta.crop_start);
}

// The fast strided kernels against ATen's own ops, for every k and axis pair.
TEST(FastKernelsTest, Rot90EqualsTorchRot90ForEveryKAndAxisPair) {
  const at::Tensor x = at::arange(2 * 5 * 6 * 7, at::kFloat).reshape({2, 5, 6, 7});
  Sample s;
  s.image = x;
  s.label = x + 1000;
  for (std::array<int64_t, 2> axes :
       {std::array<int64_t, 2>{0, 1}, {0, 2}, {1, 2}, {2, 0}, {1, 0}, {2, 1}}) {
    Rotate90Options o;
    o.spatial_axes = axes;
    for (int64_t k = 1; k <= 3; ++k) {
      const Sample r = apply_rotate90(s, {k, true}, o);
      const at::Tensor expected = at::rot90(x, k, {1 + axes[0], 1 + axes[1]});
      ASSERT_TRUE(at::equal(r.image, expected))
          << "k=" << k << " axes=" << axes[0] << "," << axes[1];
      ASSERT_TRUE(at::equal(r.label, expected + 1000));
      ASSERT_TRUE(r.image.is_contiguous());
    }
  }
}

TEST(FastKernelsTest, CropAndFlipEqualSliceAndTorchFlip) {
  const at::Tensor x = at::arange(3 * 9 * 8 * 7, at::kFloat).reshape({3, 9, 8, 7});
  Sample s;
  s.image = x;
  s.label = x;
  CropParams c;
  c.start = {2, 1, 3};
  c.size = {5, 6, 4};
  const Sample cropped = apply_crop(s, c, 0);
  EXPECT_TRUE(at::equal(cropped.image, x.slice(1, 2, 7).slice(2, 1, 7).slice(3, 3, 7)));
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    FlipOptions f;
    f.spatial_axes = axes;
    std::vector<int64_t> dims;
    for (int64_t a : axes) dims.push_back(a + 1);
    EXPECT_TRUE(at::equal(apply_flip(s, true, f).image, at::flip(x, dims)));
  }
  // non-float tensors take ATen's path and agree
  Sample ints;
  ints.image = x.to(at::kInt);
  ints.label = x.to(at::kInt);
  EXPECT_TRUE(at::equal(apply_crop(ints, c, 0).image, cropped.image.to(at::kInt)));
}

// The same tensor values in another memory layout: spatial axes stored in the
// order `order` (e.g. {2, 1, 0}: a NIfTI file-order view), still dense.
at::Tensor relaid(const at::Tensor& t, const std::vector<int64_t>& order) {
  std::vector<int64_t> forward{0}, back(4);
  for (int64_t a : order) forward.push_back(1 + a);
  for (int64_t d = 0; d < 4; ++d) back[static_cast<size_t>(forward[static_cast<size_t>(d)])] = d;
  return t.permute(forward).contiguous().permute(back);
}

// Crops, flips and quarter turns composed as a SpatialMap and gathered once
// equal the same steps done one after another with ATen's slice, flip and
// rot90, for any source layout and the supported dtype conversions.
RC_GTEST_PROP(SpatialViewProperty, GatheredMapEqualsAtenStepByStep, ()) {
  const auto channels = *rc::gen::inRange<int64_t>(1, 3);
  std::array<int64_t, 3> shape{};
  for (auto& n : shape) n = *rc::gen::inRange<int64_t>(1, 14);
  at::Tensor source = at::arange(channels * shape[0] * shape[1] * shape[2], at::kFloat)
                          .reshape({channels, shape[0], shape[1], shape[2]});
  const auto order = *rc::gen::elementOf(
      std::vector<std::vector<int64_t>>{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {0, 2, 1}});
  const bool bytes = *rc::gen::arbitrary<bool>();
  if (bytes) source = source.remainder(251).to(at::kByte);
  source = relaid(source, order);
  SpatialMap map = SpatialMap::identity(shape);
  at::Tensor expected = source;
  const auto steps = *rc::gen::inRange(0, 5);
  for (int step = 0; step < steps; ++step) {
    const int kind = *rc::gen::inRange(0, 3);
    const std::array<int64_t, 3> now{expected.size(1), expected.size(2), expected.size(3)};
    if (kind == 0) {
      std::array<int64_t, 3> start{}, size{};
      for (size_t a = 0; a < 3; ++a) {
        start[a] = *rc::gen::inRange<int64_t>(0, now[a]);
        size[a] = *rc::gen::inRange<int64_t>(1, now[a] - start[a] + 1);
        expected = expected.slice(static_cast<int64_t>(1 + a), start[a], start[a] + size[a]);
      }
      map = map.cropped(start, size);
    } else if (kind == 1) {
      const auto axis = *rc::gen::inRange<int64_t>(0, 3);
      expected = at::flip(expected, {1 + axis});
      map = map.flipped(axis);
    } else {
      const auto k = *rc::gen::inRange<int64_t>(0, 4);
      const auto p = *rc::gen::inRange<int64_t>(0, 3);
      const auto q = (p + *rc::gen::inRange<int64_t>(1, 3)) % 3;
      expected = at::rot90(expected, k, {1 + p, 1 + q});
      map = map.rotated90(k, p, q);
    }
  }
  RC_ASSERT(map.size ==
            (std::array<int64_t, 3>{expected.size(1), expected.size(2), expected.size(3)}));
  Sample s;
  s.image = source;
  s.label = source;
  s.view = map;
  const Sample m = materialize(s);
  RC_ASSERT(map.is_identity(shape) || m.image.is_contiguous());
  RC_ASSERT(at::equal(m.image, expected));
  at::Tensor image = at::empty(expected.sizes(), at::kFloat),
             label = at::empty(expected.sizes(), source.scalar_type());
  materialize_into(s, image, label);
  RC_ASSERT(at::equal(image, expected.to(at::kFloat)));
  RC_ASSERT(at::equal(label, expected));
  // The GPU path's tensor ops, run on the CPU: the same bits.
  image.zero_();
  label.zero_();
  materialize_into(s, image, label, Gather::kTensorOps);
  RC_ASSERT(at::equal(image, expected.to(at::kFloat)));
  RC_ASSERT(at::equal(label, expected));
}

// The vectorised scan against at::nonzero, on float labels of runs (the fast
// path's 16-at-a-time blocks), isolated voxels and NaN (foreground, as != 0),
// and on the same labels as uint8.
// CropForeground's box from float32 (one scan of each row from both ends)
// equals the box of the same values as float64 (ATen's mask, any and
// nonzero): sparse and dense foregrounds, several channels, NaN and negative
// values, file-order strides, margins.
RC_GTEST_PROP(ForegroundBoxProperty, TheFloatScanEqualsTheMaskOfAnyDtype, ()) {
  const auto channels = *rc::gen::inRange<int64_t>(1, 3);
  std::array<int64_t, 3> shape{};
  for (auto& n : shape) n = *rc::gen::inRange<int64_t>(1, 12);
  const int64_t voxels = channels * shape[0] * shape[1] * shape[2];
  at::Tensor values = at::full({voxels}, -1.0f);
  float* p = values.data_ptr<float>();
  const auto hits = *rc::gen::inRange<int64_t>(0, 6);
  for (int64_t k = 0; k < hits; ++k)
    p[*rc::gen::inRange<int64_t>(0, voxels)] =
        *rc::gen::elementOf(std::vector<float>{0.5f, 2.0f, 1e-30f});
  p[*rc::gen::inRange<int64_t>(0, voxels)] = std::nanf("");
  p[*rc::gen::inRange<int64_t>(0, voxels)] = 0.0f;
  at::Tensor image = values.reshape({channels, shape[0], shape[1], shape[2]});
  if (*rc::gen::arbitrary<bool>())
    image = image.permute({0, 3, 2, 1}).contiguous().permute({0, 3, 2, 1});
  const auto margin = *rc::gen::inRange<int64_t>(0, 3);
  const VoxelBox fast = foreground_box(image, margin);
  const VoxelBox mask = foreground_box(image.to(at::kDouble), margin);
  RC_ASSERT(fast.start == mask.start);
  RC_ASSERT(fast.end == mask.end);
}

RC_GTEST_PROP(LabelIndicesProperty, EqualNonzeroInCOrder, ()) {
  std::array<int64_t, 3> shape{};
  for (auto& n : shape) n = *rc::gen::inRange<int64_t>(1, 11);
  const int64_t voxels = shape[0] * shape[1] * shape[2];
  at::Tensor label = at::zeros({voxels});
  float* p = label.data_ptr<float>();
  for (int64_t v = 0; v < voxels;) {
    const auto run = *rc::gen::inRange<int64_t>(1, 9);
    const float value = *rc::gen::elementOf(std::vector<float>{0.0f, 0.0f, 1.0f, 2.5f, NAN});
    for (int64_t k = 0; k < run && v < voxels; ++k) p[v++] = value;
  }
  label = label.reshape({1, shape[0], shape[1], shape[2]});
  const LabelIndices got = label_indices(label);
  const at::Tensor flat = label.reshape({-1});
  const at::Tensor fg = at::nonzero(flat != 0).reshape({-1}).to(at::kInt);
  const at::Tensor bg = at::nonzero(flat == 0).reshape({-1}).to(at::kInt);
  const std::vector<int32_t> fg_list(fg.data_ptr<int32_t>(), fg.data_ptr<int32_t>() + fg.numel());
  const std::vector<int32_t> bg_list(bg.data_ptr<int32_t>(), bg.data_ptr<int32_t>() + bg.numel());
  RC_ASSERT(got.foreground == fg_list);
  RC_ASSERT(background_of(got) == bg_list);
  const LabelIndices bytes = label_indices(label.nan_to_num(3.0).to(at::kByte));
  RC_ASSERT(bytes.foreground == fg_list);
  RC_ASSERT(background_of(bytes) == bg_list);
}

TEST(SpatialViewTest, MaterializeIntoRefusesADestinationOfAnotherShape) {
  Sample s = box_sample({6, 6, 6}, {1, 1, 1}, {3, 3, 3});
  s.view = SpatialMap::identity({6, 6, 6}).cropped({0, 0, 0}, {4, 4, 4});
  at::Tensor image = at::empty({1, 4, 4, 5}), label = at::empty({1, 4, 4, 4});
  try {
    materialize_into(s, image, label);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("image's destination is not a contiguous 1 x 4 x 4 x 4"));
  }
  EXPECT_THROW(SpatialMap::identity({6, 6, 6}).cropped({3, 0, 0}, {4, 1, 1}), std::out_of_range);
}

// Planes too big to buffer all at once go through the transposing copy in
// several groups, with a short last group and rows that are not a multiple of
// four long; the property above only reaches single-group volumes.
TEST(SpatialViewTest, TransposingCopiesOfLargeViewsEqualAten) {
  const std::array<int64_t, 3> shape{150, 61, 130};
  const at::Tensor values =
      at::arange(shape[0] * shape[1] * shape[2], at::kFloat).reshape({1, 150, 61, 130});
  for (const auto& order : std::vector<std::vector<int64_t>>{{0, 1, 2}, {2, 1, 0}, {0, 2, 1}}) {
    for (const bool bytes : {false, true}) {
      const at::Tensor source = relaid(bytes ? values.remainder(251).to(at::kByte) : values, order);
      for (const int64_t k : {0, 1, 3}) {
        const SpatialMap m =
            SpatialMap::identity(shape).cropped({3, 2, 1}, {147, 57, 126}).rotated90(k, 0, 2);
        at::Tensor got = at::empty({1, m.size[0], m.size[1], m.size[2]}, at::kFloat);
        at::Tensor got_label = at::empty_like(got);
        Sample s;
        s.image = s.label = source;
        s.view = m;
        materialize_into(s, got, got_label);
        const at::Tensor want =
            at::rot90(source.slice(1, 3, 150).slice(2, 2, 59).slice(3, 1, 127), k, {1, 3});
        ASSERT_TRUE(at::equal(got, want.to(at::kFloat)))
            << "order " << order[0] << order[1] << order[2] << (bytes ? " uint8" : " float")
            << " k " << k;
      }
    }
  }
}

TEST(SpatialViewTest, LazyComposeMovesNoPixelsAndMaterialisesToTheEagerResult) {
  Sample s = box_sample({20, 18, 16}, {4, 5, 6}, {12, 11, 10});
  s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  PosNegCropOptions c;
  c.spatial_size = {8, 6, 10};
  c.num_samples = 3;
  Rotate90Options r;
  r.prob = 1.0;
  r.spatial_axes = {0, 2};
  FlipOptions f;
  f.prob = 0.5;
  f.spatial_axes = {1};
  const Compose pipeline(
      {make_rand_crop_by_pos_neg_label(c), make_rand_rotate90(r), make_rand_flip(f)});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto lazy = pipeline.lazy(s, seed);
    const auto eager = pipeline(s, seed);
    ASSERT_EQ(lazy.size(), eager.size());
    for (size_t k = 0; k < lazy.size(); ++k) {
      ASSERT_TRUE(lazy[k].view.has_value());
      EXPECT_EQ(lazy[k].image.data_ptr(), s.image.data_ptr());  // still the source
      const Sample m = materialize(lazy[k]);
      ASSERT_TRUE(at::equal(m.image, eager[k].image)) << "seed " << seed << " crop " << k;
      ASSERT_TRUE(at::equal(m.label, eager[k].label));
      EXPECT_FALSE(eager[k].view.has_value());
      EXPECT_EQ(m.meta.rot90_k, eager[k].meta.rot90_k);
      EXPECT_EQ(m.meta.flipped, eager[k].meta.flipped);
    }
  }
}

// The cache's label indices describe the stored volume: a crop drawn after a
// flip must use the flipped label, eager or lazy.
TEST(RandCropByPosNegLabelTest, AfterAFlipTheCropIsDrawnFromTheFlippedLabel) {
  Sample s = box_sample({9, 9, 9}, {1, 1, 1}, {2, 2, 2});  // one foreground voxel near the origin
  s.indices = std::make_shared<const LabelIndices>(label_indices(s.label));
  FlipOptions f;
  f.prob = 1.0;
  PosNegCropOptions c;
  c.spatial_size = {1, 1, 1};
  c.pos = 1.0;
  c.neg = 0.0;
  c.num_samples = 4;
  const Compose pipeline({make_rand_flip(f), make_rand_crop_by_pos_neg_label(c)});
  for (uint64_t seed = 0; seed < 5; ++seed) {
    for (const Sample& crop : pipeline(s, seed)) EXPECT_EQ(crop.label.item<float>(), 1.0f);
    for (const Sample& crop : pipeline.lazy(s, seed))
      EXPECT_EQ(materialize(crop).label.item<float>(), 1.0f);
  }
}

TEST(ScaleIntensityTest, AFileOrderViewScalesInItsOwnLayoutToTheSameValues) {
  const at::Tensor x = at::randn({2, 7, 6, 5}) * 37.5 + 3;
  const at::Tensor f = relaid(x, {2, 1, 0});
  const at::Tensor y = scale_intensity(f);
  EXPECT_TRUE(at::equal(y, scale_intensity(x)));
  EXPECT_EQ(y.strides(), f.strides());
  at::Tensor nan = f.clone();
  nan[1][3][2][1] = NAN;
  EXPECT_TRUE(at::isnan(scale_intensity(relaid(nan, {2, 1, 0}))).all().item<bool>());
}

// Labels 0..4 along the first axis.
at::Tensor labels_0_to_4() { return at::arange(5, at::kFloat).reshape({1, 5, 1, 1}); }

at::Tensor channels(std::vector<std::vector<float>> rows) {
  std::vector<at::Tensor> t;
  for (auto& r : rows) t.push_back(at::tensor(r).reshape({1, 5, 1, 1}));
  return at::cat(t, 0);
}

TEST(BratsChannelsTest, BratsLabelsAreTcOneOrFourWtOneTwoOrFourEtFour) {
  const at::Tensor got = brats_channels(labels_0_to_4(), BratsLabels::kBrats);
  EXPECT_TRUE(at::equal(got, channels({{0, 1, 0, 0, 1}, {0, 1, 1, 0, 1}, {0, 0, 0, 0, 1}})));
}

TEST(BratsChannelsTest, DecathlonLabelsAreTcTwoOrThreeWtOneTwoOrThreeEtThree) {
  const at::Tensor want = channels({{0, 0, 1, 1, 0}, {0, 1, 1, 1, 0}, {0, 0, 0, 1, 0}});
  const at::Tensor got = brats_channels(labels_0_to_4(), BratsLabels::kDecathlon);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(got, want));
  const at::Tensor bytes = brats_channels(labels_0_to_4().to(at::kByte), BratsLabels::kDecathlon);
  EXPECT_EQ(bytes.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(bytes, want.to(at::kByte)));
  // Any strides and other integer types give the same channels.
  const at::Tensor cube = at::randint(0, 4, {1, 3, 4, 5}).to(at::kFloat);
  EXPECT_TRUE(at::equal(
      brats_channels(cube.transpose(1, 3).contiguous().transpose(1, 3), BratsLabels::kDecathlon),
      brats_channels(cube.to(at::kInt), BratsLabels::kDecathlon)));
  EXPECT_THAT(
      [] {
        brats_channels(at::zeros({2, 3, 3, 3}), BratsLabels::kBrats);
      },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("C=2")));
}

// volshard::one_hot, qualified: unqualified, ADL also finds at::one_hot(Tensor,
// int64_t) and the call is ambiguous.
TEST(OneHotTest, EachClassIndexBecomesItsChannel) {
  const at::Tensor label = at::tensor({0.0f, 2.0f, 1.0f, 2.0f, 0.0f}).reshape({1, 5, 1, 1});
  const at::Tensor want = channels({{1, 0, 0, 0, 1}, {0, 0, 1, 0, 0}, {0, 1, 0, 1, 0}});
  EXPECT_TRUE(at::equal(volshard::one_hot(label, 3), want));
  EXPECT_TRUE(at::equal(volshard::one_hot(label.to(at::kByte), 3), want));
  EXPECT_TRUE(at::equal(volshard::one_hot(label.to(at::kLong), 3), want));
  EXPECT_EQ(volshard::one_hot(label, 4).size(0), 4);
  EXPECT_EQ(volshard::one_hot(label, 4)[3].sum().item<float>(), 0.0f);
}

TEST(OneHotTest, AValueThatIsNotAClassIndexIsNamed) {
  using ::testing::ThrowsMessage;
  auto with = [](float v) {
    at::Tensor l = at::zeros({1, 2, 3, 4});
    l[0][1][2][3] = v;
    l[0][1][2][2] = 2.0f;  // valid, before the bad one
    return l;
  };
  for (const auto& [value, text] :
       std::vector<std::pair<float, std::string>>{{1.5f, "value 1.5 at voxel (1, 2, 3)"},
                                                  {3.0f, "value 3 at voxel (1, 2, 3)"},
                                                  {-1.0f, "value -1 at"},
                                                  {NAN, "value nan at"}}) {
    EXPECT_THAT([&] { volshard::one_hot(with(value), 3); },
                ThrowsMessage<std::invalid_argument>(HasSubstr(text)));
  }
  EXPECT_THAT([&] { volshard::one_hot(with(200.0f).to(at::kByte), 3); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("value 200")));
  EXPECT_THAT([&] { volshard::one_hot(with(0.0f), 0); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("num_classes=0")));
  EXPECT_THAT(
      [&] {
        volshard::one_hot(at::zeros({3, 2, 2, 2}), 3);
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("C=3")));
}

TEST(RandIntensityTest, ValidateNamesTheBadValue) {
  using ::testing::ThrowsMessage;
  auto options = [](double lo, double hi, double prob) {
    RandIntensityOptions o;
    o.lo = lo;
    o.hi = hi;
    o.prob = prob;
    return o;
  };
  EXPECT_NO_THROW(options(-0.1, 0.1, 1.0).validate());
  EXPECT_NO_THROW(options(0.5, 0.5, 0.0).validate());  // a fixed value is fine
  EXPECT_THAT([&] { options(0.2, 0.1, 1.0).validate(); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("lo=0.2 and hi=0.1")));
  EXPECT_THAT([&] { options(NAN, 0.1, 1.0).validate(); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("lo=nan")));
  EXPECT_THAT([&] { options(0.0, INFINITY, 1.0).validate(); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("hi=inf")));
  EXPECT_THAT([&] { options(0.0, 0.1, 1.5).validate(); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("prob=1.5")));
  EXPECT_THAT([&] { make_rand_shift_intensity(options(0.0, 0.1, -0.5)); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("prob=-0.5")));
}

TEST(RandIntensityTest, DrawsApplyThenTheValueAlwaysBoth) {
  RandIntensityOptions o;
  o.lo = -0.3;
  o.hi = 0.7;
  for (const double prob : {0.0, 0.5, 1.0}) {
    o.prob = prob;
    for (uint64_t seed = 0; seed < 50; ++seed) {
      StreamRng rng(seed), replay(seed);
      const RandIntensityParams p = sample_rand_intensity(o, rng);
      const double u_apply = replay.uniform_double(), u_value = replay.uniform_double();
      EXPECT_EQ(p.apply, u_apply < prob);
      EXPECT_EQ(p.value, -0.3 + (0.7 - -0.3) * u_value);
      EXPECT_EQ(rng.next_u64(), replay.next_u64()) << "two draws, applied or not";
    }
  }
}

TEST(RandIntensityTest, ValueIsUniformInLoHiAndApplyHasProbabilityProb) {
  RandIntensityOptions o;
  o.lo = -0.1;
  o.hi = 0.3;
  o.prob = 0.3;
  StreamRng rng(2024);
  const int n = 20000;
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  int applied = 0;
  for (int i = 0; i < n; ++i) {
    const RandIntensityParams p = sample_rand_intensity(o, rng);
    sum += p.value;
    lo = std::min(lo, p.value);
    hi = std::max(hi, p.value);
    applied += p.apply ? 1 : 0;
  }
  const double sd_mean = (o.hi - o.lo) / std::sqrt(12.0 * n);
  EXPECT_NEAR(sum / n, (o.lo + o.hi) / 2, 5 * sd_mean);
  EXPECT_GE(lo, o.lo);
  EXPECT_LT(hi, o.hi);
  EXPECT_LT(lo, o.lo + 0.001);  // both ends are reached
  EXPECT_GT(hi, o.hi - 0.001);
  EXPECT_NEAR(applied, n * o.prob, 5 * std::sqrt(n * o.prob * (1 - o.prob)));
}

// An image of varied float32 values and a label the steps must not touch.
Sample intensity_sample() {
  Sample s;
  s.image = at::randn({2, 5, 4, 3}) * 50 + 7;
  s.label = at::randint(0, 3, {1, 5, 4, 3}).to(at::kFloat);
  return s;
}

TEST(RandIntensityTest, ScaleAndShiftAreFloat32ImageTimesOnePlusValueAndImagePlusValue) {
  RandIntensityOptions o;
  o.lo = -0.25;
  o.hi = 0.25;
  o.prob = 1.0;
  const Sample s = intensity_sample();
  const at::Tensor x = s.image.clone();
  for (const bool scale : {true, false}) {
    const auto step = scale ? make_rand_scale_intensity(o) : make_rand_shift_intensity(o);
    EXPECT_EQ(step->name(), scale ? "RandScaleIntensity" : "RandShiftIntensity");
    for (uint64_t seed : {1u, 2u, 3u}) {
      StreamRng rng(seed), replay(seed);
      const auto out = (*step)(s, rng);
      ASSERT_EQ(out.size(), 1u);
      const double value = sample_rand_intensity(o, replay).value;
      ASSERT_NE(value, 0.0);
      // float32 arithmetic with the value rounded to float32, as ATen with a Python float.
      const at::Tensor got = out[0].image.contiguous();
      ASSERT_EQ(got.scalar_type(), at::kFloat);
      const float* in = x.data_ptr<float>();
      const float* o32 = got.data_ptr<float>();
      const auto factor = static_cast<float>(1.0 + value), offset = static_cast<float>(value);
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_EQ(o32[i], scale ? in[i] * factor : in[i] + offset) << i;
      EXPECT_EQ(out[0].label.data_ptr(), s.label.data_ptr());
      EXPECT_TRUE(at::equal(s.image, x)) << "the input is not written";
    }
  }
}

TEST(RandIntensityTest, NotAppliedLeavesTheImageBitIdentical) {
  RandIntensityOptions o;
  o.lo = 0.5;
  o.hi = 0.9;
  o.prob = 0.0;
  const Sample s = intensity_sample();
  for (const auto& step : {make_rand_scale_intensity(o), make_rand_shift_intensity(o)}) {
    StreamRng rng(5);
    const auto out = (*step)(s, rng);
    EXPECT_TRUE(at::equal(out[0].image, s.image));
    EXPECT_EQ(out[0].image.data_ptr(), s.image.data_ptr());
    EXPECT_EQ(out[0].label.data_ptr(), s.label.data_ptr());
  }
}

// ---- RandGaussianNoise, RandGaussianSmooth, RandAdjustContrast, RandBiasField

TEST(RandGaussianNoiseTest, DrawsApplyThenTheSpreadThenTheFieldsKeyAlwaysAll) {
  GaussianNoiseOptions o;
  o.std = 0.4;
  for (const bool sample_std : {true, false}) {
    o.sample_std = sample_std;
    for (const double prob : {0.0, 0.5, 1.0}) {
      o.prob = prob;
      for (uint64_t seed = 0; seed < 50; ++seed) {
        StreamRng rng(seed), replay(seed);
        const GaussianNoiseParams p = sample_gaussian_noise(o, rng);
        const double u_apply = replay.uniform_double(), u_std = replay.uniform_double();
        EXPECT_EQ(p.apply, u_apply < prob);
        EXPECT_EQ(p.std, sample_std ? 0.4 * u_std : 0.4);  // MONAI's R.uniform(0, std)
        EXPECT_EQ(p.noise_key, replay.next_u64());
        EXPECT_EQ(rng.next_u64(), replay.next_u64()) << "three draws, applied or not";
      }
    }
  }
}

TEST(RandGaussianSmoothTest, DrawsApplyThenSigmaXYZAlways) {
  GaussianSmoothOptions o;
  o.sigma = {{{0.25, 1.5}, {0.5, 0.5}, {1.0, 3.0}}};
  for (const double prob : {0.0, 0.5, 1.0}) {
    o.prob = prob;
    for (uint64_t seed = 0; seed < 50; ++seed) {
      StreamRng rng(seed), replay(seed);
      const GaussianSmoothParams p = sample_gaussian_smooth(o, rng);
      EXPECT_EQ(p.apply, replay.uniform_double() < prob);
      EXPECT_EQ(p.sigma[0], 0.25 + (1.5 - 0.25) * replay.uniform_double());
      EXPECT_EQ(p.sigma[1], 0.5 + (0.5 - 0.5) * replay.uniform_double());
      EXPECT_EQ(p.sigma[2], 1.0 + (3.0 - 1.0) * replay.uniform_double());
      EXPECT_EQ(rng.next_u64(), replay.next_u64()) << "four draws, applied or not";
    }
  }
}

TEST(RandAdjustContrastTest, DrawsApplyThenGammaAlwaysBoth) {
  AdjustContrastOptions o;
  o.gamma = {0.7, 1.5};
  for (const double prob : {0.0, 0.5, 1.0}) {
    o.prob = prob;
    for (uint64_t seed = 0; seed < 50; ++seed) {
      StreamRng rng(seed), replay(seed);
      const AdjustContrastParams p = sample_adjust_contrast(o, rng);
      EXPECT_EQ(p.apply, replay.uniform_double() < prob);
      EXPECT_EQ(p.gamma, 0.7 + (1.5 - 0.7) * replay.uniform_double());
      EXPECT_EQ(rng.next_u64(), replay.next_u64()) << "two draws, applied or not";
    }
  }
}

TEST(RandBiasFieldTest, DrawsApplyThenEveryCoefficientAlways) {
  BiasFieldOptions o;
  o.coeff = {-0.2, 0.3};
  for (const int64_t degree : {1, 3}) {
    o.degree = degree;
    for (const double prob : {0.0, 0.5, 1.0}) {
      o.prob = prob;
      for (uint64_t seed = 0; seed < 30; ++seed) {
        StreamRng rng(seed), replay(seed);
        const BiasFieldParams p = sample_bias_field(o, rng);
        EXPECT_EQ(p.apply, replay.uniform_double() < prob);
        ASSERT_EQ(p.coeff.size(), degree == 1 ? 4u : 20u);  // (d + 1)(d + 2)(d + 3) / 6
        for (const double c : p.coeff) EXPECT_EQ(c, -0.2 + (0.3 - -0.2) * replay.uniform_double());
        EXPECT_EQ(rng.next_u64(), replay.next_u64()) << "every draw, applied or not";
      }
    }
  }
}

// Coefficient t alone gives its term P_i(x) P_j(y) P_k(z), the terms in
// MONAI's order (i, then j, then k), each axis's coordinates -1 .. 1.
TEST(RandBiasFieldTest, EachCoefficientScalesItsLegendreTermInMonaisOrder) {
  const auto legendre = [](int64_t n, double x) {
    return n == 0 ? 1.0 : n == 1 ? x : 0.5 * (3.0 * x * x - 1.0);
  };
  const std::array<int64_t, 3> shape{5, 4, 3};
  const auto coordinate = [](int64_t i, int64_t n) {
    return static_cast<double>(
        static_cast<float>(-1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1)));
  };
  int64_t t = 0;
  for (int64_t i = 0; i <= 2; ++i) {
    for (int64_t j = 0; j <= 2 - i; ++j) {
      for (int64_t k = 0; k <= 2 - i - j; ++k, ++t) {
        std::vector<double> coeff(10, 0.0);
        coeff[static_cast<size_t>(t)] = 0.5;
        const at::Tensor field = bias_field(shape, 2, coeff, c10::Device(c10::kCPU));
        ASSERT_EQ(field.sizes(), at::IntArrayRef({5, 4, 3}));
        for (int64_t a = 0; a < 5; ++a)
          for (int64_t b = 0; b < 4; ++b)
            for (int64_t c = 0; c < 3; ++c) {
              const double want = 0.5 * legendre(i, coordinate(a, 5)) *
                                  legendre(j, coordinate(b, 4)) * legendre(k, coordinate(c, 3));
              EXPECT_NEAR(field[a][b][c].item<double>(), want, 1e-12)
                  << "term " << t << " at " << a << b << c;
            }
      }
    }
  }
  EXPECT_EQ(t, 10);
  // An axis of one voxel sits at -1, as numpy's linspace(-1, 1, 1).
  std::vector<double> x_only(10, 0.0);
  x_only[6] = 1.0;  // (i, j, k) = (1, 0, 0): P_1(x)
  EXPECT_EQ(bias_field({1, 2, 2}, 2, x_only, c10::Device(c10::kCPU)).max().item<double>(), -1.0);
}

// The host pass and the tensor ops (the GPU's code, here on the CPU): the
// same field and the same exp, so the same bits.
TEST(RandBiasFieldTest, TheHostPassGivesTheTensorOpsBits) {
  at::manual_seed(3);
  const at::Tensor image = at::randn({3, 17, 13, 11}) * 50.0f;
  for (const int64_t degree : {1, 4}) {
    std::vector<double> coeff(static_cast<size_t>(bias_field_terms(degree)));
    for (size_t t = 0; t < coeff.size(); ++t)
      coeff[t] = 0.3 * std::sin(1.0 + static_cast<double>(t));
    const at::Tensor host = apply_bias_field(image, degree, coeff, Gather::kAuto);
    const at::Tensor ops = apply_bias_field(image, degree, coeff, Gather::kTensorOps);
    EXPECT_TRUE(at::equal(host, ops)) << "degree " << degree;
    const at::Tensor field = bias_field({17, 13, 11}, degree, coeff, c10::Device(c10::kCPU));
    EXPECT_TRUE(at::equal(host, (image.to(at::kDouble) * field.exp()).to(at::kFloat)));
    EXPECT_FALSE(at::equal(host, image)) << "degree " << degree;
  }
}

TEST(RandAugmentationOptionsTest, ValidateNamesTheBadValue) {
  using ::testing::ThrowsMessage;
  GaussianNoiseOptions noise;
  noise.std = -0.1;
  EXPECT_THAT([&] { make_rand_gaussian_noise(noise); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("std=-0.1")));
  noise.std = 0.1;
  noise.mean = NAN;
  EXPECT_THAT([&] { noise.validate(); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("mean=nan")));
  noise.mean = 0;
  noise.prob = 2;
  EXPECT_THAT([&] { noise.validate(); }, ThrowsMessage<std::invalid_argument>(HasSubstr("prob=2")));
  GaussianSmoothOptions smooth;
  smooth.sigma[1] = {1.0, 0.5};
  EXPECT_THAT([&] { make_rand_gaussian_smooth(smooth); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("sigma_y=(1, 0.5)")));
  smooth.sigma[1] = {0.5, 1e300};
  EXPECT_THAT([&] { smooth.validate(); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("<= 100")));
  AdjustContrastOptions contrast;
  contrast.gamma = {0.0, 1.0};
  EXPECT_THAT([&] { make_rand_adjust_contrast(contrast); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("gamma=(0, 1)")));
  contrast.gamma = {0.5, INFINITY};
  EXPECT_THAT([&] { contrast.validate(); }, ThrowsMessage<std::invalid_argument>(HasSubstr("inf")));
  BiasFieldOptions bias;
  bias.degree = 0;
  EXPECT_THAT([&] { make_rand_bias_field(bias); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("degree=0 must be in [1, 10]")));
  bias.degree = 3;
  bias.coeff = {0.2, 0.1};
  EXPECT_THAT([&] { bias.validate(); }, ThrowsMessage<std::invalid_argument>(HasSubstr(
                                            "coeff=(0.2, 0.1) must be finite with lo <= hi")));
  bias.coeff = {0.0, NAN};
  EXPECT_THAT([&] { bias.validate(); }, ThrowsMessage<std::invalid_argument>(HasSubstr("nan")));
  EXPECT_THAT(
      [&] {
        bias_field({4, 4, 4}, 3, std::vector<double>(10, 0.1), c10::Device(c10::kCPU));
      },
      ThrowsMessage<std::invalid_argument>(HasSubstr("10 coefficients for degree 3: must be 20")));
}

TEST(GaussianNoiseFieldTest, IsStandardNormalAndValueKDependsOnKeyAndKOnly) {
  const int64_t n = 200001;  // odd: the last pair gives one value
  const at::Tensor z = gaussian_noise_field({n}, 42, c10::Device(c10::kCPU));
  ASSERT_EQ(z.scalar_type(), at::kDouble);
  const double mean = z.mean().item<double>(), var = z.var().item<double>();
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / static_cast<double>(n)));
  const double within_one = (z.abs() < 1.0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(within_one, 0.682689, 5.0 * std::sqrt(0.2166 / static_cast<double>(n)));
  // Neighbours (one pair's sine and cosine, and one pair to the next) uncorrelated.
  for (const int64_t lag : {1, 2}) {
    const double r = (z.narrow(0, 0, n - lag) * z.narrow(0, lag, n - lag)).mean().item<double>();
    EXPECT_NEAR(r, 0.0, 5.0 / std::sqrt(static_cast<double>(n))) << "lag " << lag;
  }
  const at::Tensor shaped = gaussian_noise_field({2, 3, 4, 5}, 42, c10::Device(c10::kCPU));
  EXPECT_TRUE(at::equal(shaped.flatten(), z.narrow(0, 0, 120))) << "a prefix of the larger field";
  const at::Tensor other = gaussian_noise_field({2, 3, 4, 5}, 43, c10::Device(c10::kCPU));
  EXPECT_EQ((other != shaped).sum().item<int64_t>(), 120) << "another key, other values";
}

// The host loop against the tensor ops a GPU runs, both on the CPU: the same
// integers behind every value, so the values agree to libm's rounding of
// log, cos and sin (the GPU's test compares the devices the same way).
TEST(GaussianNoiseFieldTest, TheHostLoopGivesTheTensorOpsValuesWithinRounding) {
  const c10::Device cpu(c10::kCPU);
  for (const uint64_t key : {uint64_t{0}, uint64_t{42}, ~uint64_t{0} - 12345}) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{(1 << 18) + 3}}) {
      const at::Tensor host = gaussian_noise_field({n}, key, cpu);
      const at::Tensor ops = gaussian_noise_field({n}, key, cpu, Gather::kTensorOps);
      ASSERT_EQ(host.scalar_type(), at::kDouble);
      ASSERT_EQ(host.sizes(), ops.sizes());
      EXPECT_TRUE(at::allclose(host, ops, 1e-13, 1e-14)) << "key " << key << ", n " << n;
      EXPECT_LT((host - ops).abs().max().item<double>(), 1e-14) << "key " << key << ", n " << n;
    }
  }
  const at::Tensor shaped = gaussian_noise_field({2, 3, 4, 5}, 9, cpu);
  EXPECT_EQ(shaped.sizes(), (at::IntArrayRef{2, 3, 4, 5}));
  EXPECT_TRUE(at::allclose(shaped, gaussian_noise_field({2, 3, 4, 5}, 9, cpu, Gather::kTensorOps),
                           1e-13, 1e-14));
}

// Rand3DElastic's offsets: integers and exact scalings, so the host loop
// gives the tensor ops' (the GPU's) values bit for bit.
TEST(UniformFieldTest, TheHostLoopGivesTheTensorOpsValuesBitForBit) {
  const c10::Device cpu(c10::kCPU);
  for (const uint64_t key : {uint64_t{0}, uint64_t{5}, ~uint64_t{0}}) {
    const at::Tensor host = uniform_field({3, 17, 40, 9}, key, cpu);
    const at::Tensor ops = uniform_field({3, 17, 40, 9}, key, cpu, Gather::kTensorOps);
    ASSERT_EQ(host.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(host, ops)) << "key " << key;
    EXPECT_GE(host.min().item<float>(), -1.0f);
    EXPECT_LE(host.max().item<float>(), 1.0f);  // 1 - 2^-31 rounds to 1 in float32
  }
}

TEST(RandGaussianNoiseTest, AddsTheFieldOfItsKeyTimesTheDrawnSpreadInFloat32) {
  GaussianNoiseOptions o;
  o.prob = 1.0;
  o.mean = 0.25;
  o.std = 3.0;
  const auto step = make_rand_gaussian_noise(o);
  EXPECT_EQ(step->name(), "RandGaussianNoise");
  const Sample s = intensity_sample();
  for (uint64_t seed : {1u, 2u, 3u}) {
    StreamRng rng(seed), replay(seed);
    const auto out = (*step)(s, rng);
    const GaussianNoiseParams p = sample_gaussian_noise(o, replay);
    const at::Tensor z = gaussian_noise_field(s.image.sizes(), p.noise_key, s.image.device());
    const at::Tensor noise32 = (z * p.std + 0.25).to(at::kFloat);
    EXPECT_TRUE(at::equal(out[0].image, s.image + noise32));
    EXPECT_EQ(out[0].label.data_ptr(), s.label.data_ptr());
    ASSERT_EQ(out[0].meta.intensity.size(), 1u);
    EXPECT_EQ(out[0].meta.intensity[0].first, "RandGaussianNoise");
    EXPECT_EQ(out[0].meta.intensity[0].second, std::vector<double>{p.std});
  }
}

// The host's one pass (the field a chunk of 4096 pairs at a time, never
// stored) against the field made whole and added: the same bits, across
// chunks and the threads' ranges, for an odd count and a strided image.
TEST(RandGaussianNoiseTest, TheOnePassGivesTheWholeFieldsSumBitForBit) {
  const at::Tensor odd = at::linspace(-300.0, 900.0, 37 * 41 * 29).reshape({1, 37, 41, 29});
  const at::Tensor strided = at::linspace(-1.0, 1.0, 2 * 30 * 20 * 10)
                                 .reshape({2, 10, 20, 30})
                                 .permute({0, 3, 2, 1});  // 2 x 30 x 20 x 10, not C order
  for (const at::Tensor& image : {odd, strided}) {
    for (const uint64_t key : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
      const at::Tensor whole = add_gaussian_noise(
          image, 0.25, 3.0, gaussian_noise_field(image.sizes(), key, image.device()));
      const at::Tensor fused = add_gaussian_noise(image, 0.25, 3.0, key);
      EXPECT_TRUE(at::equal(fused, whole))
          << "key " << key << ", " << image.sizes() << ": "
          << fused.ne(whole).sum().item<int64_t>() << " values differ";
    }
  }
}

// The host's three passes against MONAI's padded grouped convolutions (the
// GPU's path, run here on the CPU): the same sums in another order, so within
// float32 rounding of the largest value; shapes thinner than the kernel,
// several channels, every truncation.
TEST(GaussianSmoothTest, TheHostPassesGiveMonaisConvolutionsWithinRounding) {
  const struct {
    std::vector<int64_t> shape;
    std::array<double, 3> sigma;
    double truncated;
  } cases[] = {{{1, 9, 7, 12}, {1.0, 0.5, 1.5}, 4.0},
               {{3, 5, 2, 1}, {2.0, 0.0, 0.25}, 4.0},
               {{2, 20, 16, 24}, {6.5, 5.0, 8.0}, 3.0},
               {{1, 1, 33, 3}, {0.3, 3.0, 100.0}, 4.0}};
  for (const auto& c : cases) {
    const at::Tensor x = at::randn(c.shape, at::TensorOptions().dtype(at::kFloat)) * 50.0f + 7.0f;
    const at::Tensor got = gaussian_smooth(x, c.sigma, c.truncated);
    const at::Tensor want = gaussian_smooth(x, c.sigma, c.truncated, Gather::kTensorOps);
    ASSERT_EQ(got.sizes(), want.sizes());
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const double scale = x.abs().max().item<double>();
    EXPECT_LE((got - want).abs().max().item<double>(), 4e-7 * scale)
        << "shape " << c.shape[1] << "x" << c.shape[2] << "x" << c.shape[3] << ", sigma "
        << c.sigma[0];
  }
  // An integer input keeps the float32 result.
  const at::Tensor ints = at::arange(60, at::TensorOptions().dtype(at::kShort)).reshape({1, 3, 4, 5});
  EXPECT_EQ(gaussian_smooth(ints, {1.0, 1.0, 1.0}).scalar_type(), at::kFloat);
}

TEST(GaussianSmoothTest, KernelIsMonaisErfKernelAndADeltaSpreadsToItsOuterProduct) {
  for (const double sigma : {0.0, 0.1, 0.5, 1.0, 2.6}) {
    const at::Tensor k = gaussian_kernel_1d(sigma, c10::Device(c10::kCPU));
    const auto tail = static_cast<int64_t>(std::max(4.0 * sigma, 0.5) + 0.5);
    ASSERT_EQ(k.size(0), 2 * tail + 1) << sigma;
    EXPECT_TRUE(at::equal(k, k.flip(0))) << "symmetric, sigma " << sigma;
    EXPECT_NEAR(k.sum().item<double>(), 1.0, 1e-4) << "erf differences telescope to ~1";
    EXPECT_EQ(k.argmax().item<int64_t>(), tail);
  }
  const std::array<double, 3> sigma{0.6, 1.2, 0.3};
  at::Tensor delta = at::zeros({2, 15, 15, 15});
  delta[1][7][7][7] = 1.0f;
  const at::Tensor out = gaussian_smooth(delta, sigma);
  ASSERT_EQ(out.sizes(), delta.sizes());
  EXPECT_EQ(out[0].abs().max().item<float>(), 0.0f) << "channels are filtered on their own";
  const at::Tensor kx = gaussian_kernel_1d(0.6, c10::Device(c10::kCPU));
  const at::Tensor ky = gaussian_kernel_1d(1.2, c10::Device(c10::kCPU));
  const at::Tensor kz = gaussian_kernel_1d(0.3, c10::Device(c10::kCPU));
  const at::Tensor outer = kx.view({-1, 1, 1}) * ky.view({1, -1, 1}) * kz.view({1, 1, -1});
  const int64_t tx = kx.size(0) / 2, ty = ky.size(0) / 2, tz = kz.size(0) / 2;
  const at::Tensor middle = out[1]
                                .narrow(0, 7 - tx, kx.size(0))
                                .narrow(1, 7 - ty, ky.size(0))
                                .narrow(2, 7 - tz, kz.size(0));
  EXPECT_TRUE(at::allclose(middle, outer, 1e-6, 1e-9));
  EXPECT_NEAR(out.sum().item<double>(), outer.sum().item<double>(), 1e-6) << "nothing outside";
}

TEST(AdjustContrastTest, GammaOneKeepsTheImageAndAnyGammaKeepsItsMinAndMax) {
  const at::Tensor x = intensity_sample().image;
  EXPECT_TRUE(at::allclose(adjust_contrast(x, 1.0), x, 1e-5, 1e-4));
  const double lo = x.min().item<double>(), hi = x.max().item<double>();
  for (const double gamma : {0.5, 2.0, 4.5}) {
    const at::Tensor y = adjust_contrast(x, gamma);
    EXPECT_NEAR(y.min().item<double>(), lo, 1e-4) << gamma;
    EXPECT_NEAR(y.max().item<double>(), hi, 1e-3) << gamma;
    // Monotone: in the input's order the output never decreases.
    const at::Tensor in_order = y.flatten().index_select(0, at::argsort(x.flatten()));
    EXPECT_GE(at::diff(in_order).min().item<float>(), 0.0f) << gamma;
  }
}

// The four steps and the scale and shift: prob 0 gives the sample as it came
// (the same tensor), prob 1 applies at every seed and records what it drew.
std::vector<std::shared_ptr<const Transform>> intensity_steps(double prob) {
  RandIntensityOptions scale, shift;
  scale.lo = 0.2;  // a factor 1.2-1.5: never the identity
  scale.hi = 0.5;
  shift.lo = 1.0;
  shift.hi = 2.0;
  scale.prob = shift.prob = prob;
  GaussianNoiseOptions noise;
  noise.prob = prob;
  noise.std = 1.0;
  GaussianSmoothOptions smooth;
  smooth.prob = prob;
  AdjustContrastOptions contrast;
  contrast.prob = prob;
  contrast.gamma = {1.5, 3.0};
  BiasFieldOptions bias;
  bias.prob = prob;
  bias.coeff = {0.05, 0.2};  // exp(field) > 1 at the corner (1, 1, 1): never the identity
  return {make_rand_gaussian_noise(noise),     make_rand_gaussian_smooth(smooth),
          make_rand_scale_intensity(scale),    make_rand_shift_intensity(shift),
          make_rand_adjust_contrast(contrast), make_rand_bias_field(bias)};
}

TEST(RandAugmentationTest, ProbZeroIsTheIdentityAndProbOneAlwaysApplies) {
  const Sample s = intensity_sample();
  for (const auto& step : intensity_steps(0.0)) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      StreamRng rng(seed);
      const auto out = (*step)(s, rng);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].image.data_ptr(), s.image.data_ptr()) << step->name();
      EXPECT_TRUE(out[0].meta.intensity.empty()) << step->name();
    }
  }
  for (const auto& step : intensity_steps(1.0)) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      StreamRng rng(seed);
      const auto out = (*step)(s, rng);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_FALSE(at::equal(out[0].image, s.image)) << step->name() << " seed " << seed;
      EXPECT_EQ(out[0].label.data_ptr(), s.label.data_ptr()) << step->name();
      ASSERT_EQ(out[0].meta.intensity.size(), 1u) << step->name();
      EXPECT_EQ(out[0].meta.intensity[0].first, step->name());
    }
  }
}

TEST(ComposeTest, EveryRandomIntensityStepGivesTheSameOutputForTheSameSeedOnAnyThread) {
  const Compose pipeline(intensity_steps(0.6));
  const Sample s = intensity_sample();
  std::vector<Sample> here, there(20);
  for (uint64_t seed = 0; seed < 20; ++seed) here.push_back(pipeline(s, seed)[0]);
  std::vector<std::thread> workers;
  for (uint64_t w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (uint64_t seed = w; seed < 20; seed += 4) there[seed] = pipeline(s, seed)[0];
    });
  }
  for (auto& t : workers) t.join();
  int changed = 0;
  for (size_t k = 0; k < here.size(); ++k) {
    EXPECT_TRUE(at::equal(here[k].image, there[k].image)) << "seed " << k;
    EXPECT_EQ(here[k].meta.intensity, there[k].meta.intensity) << "seed " << k;
    changed += at::equal(here[k].image, here[0].image) ? 0 : 1;
  }
  EXPECT_GT(changed, 10) << "different seeds draw different values";
}

// The same steps on a GPU (skipped without one): the noise field's integers
// are the host's, so the values agree to float64 rounding of log/cos/sin.
TEST(RandAugmentationTest, OnTheGpuTheStepsMatchTheHostsWithinRounding) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const c10::Device gpu(c10::kCUDA, 0);
  const at::Tensor host = gaussian_noise_field({3, 17, 9, 5}, 7, c10::Device(c10::kCPU));
  const at::Tensor device = gaussian_noise_field({3, 17, 9, 5}, 7, gpu);
  ASSERT_TRUE(device.is_cuda());
  EXPECT_TRUE(at::allclose(device.cpu(), host, 1e-12, 1e-12));
  Sample s = intensity_sample();
  Sample on_gpu = s;
  on_gpu.image = s.image.to(gpu);
  on_gpu.label = s.label.to(gpu);
  for (const auto& step : intensity_steps(1.0)) {
    StreamRng a(5), b(5);
    const at::Tensor want = (*step)(s, a)[0].image;
    const at::Tensor got = (*step)(on_gpu, b)[0].image;
    ASSERT_TRUE(got.is_cuda()) << step->name();
    EXPECT_TRUE(at::allclose(got.cpu(), want, 1e-5, 1e-4)) << step->name();
  }
}

TEST(NormalizeIntensityStepTest, NormalizesTheImageAndLeavesTheLabel) {
  NormalizeIntensityOptions o;
  o.nonzero = true;
  o.channel_wise = true;
  const auto step = make_normalize_intensity(o);
  EXPECT_EQ(step->name(), "NormalizeIntensity");
  const Sample s = intensity_sample();
  StreamRng rng(1), untouched(1);
  const auto out = (*step)(s, rng);
  EXPECT_TRUE(at::equal(out[0].image, normalize_intensity(s.image, o)));
  EXPECT_EQ(out[0].label.data_ptr(), s.label.data_ptr());
  EXPECT_EQ(rng.next_u64(), untouched.next_u64()) << "draws nothing";
}

TEST(ComposeTest, IntensityStepsGiveTheSameOutputForTheSameSeedOnAnyThread) {
  RandIntensityOptions scale, shift;
  scale.prob = 0.7;
  shift.lo = -5.0;
  shift.hi = 5.0;
  shift.prob = 0.7;
  const Compose pipeline({make_normalize_intensity({}), make_rand_scale_intensity(scale),
                          make_rand_shift_intensity(shift)});
  const Sample s = intensity_sample();
  std::vector<at::Tensor> here, there(20);
  for (uint64_t seed = 0; seed < 20; ++seed) here.push_back(pipeline(s, seed)[0].image);
  std::thread worker([&] {
    for (uint64_t seed = 20; seed-- > 0;) there[seed] = pipeline(s, seed)[0].image;
  });
  worker.join();
  int changed = 0;
  for (size_t k = 0; k < here.size(); ++k) {
    EXPECT_TRUE(at::equal(here[k], there[k])) << "seed " << k;
    changed += at::equal(here[k], here[0]) ? 0 : 1;
  }
  EXPECT_GT(changed, 10) << "different seeds draw different values";
}

// ---- RandAffine and RandZoom, around the crop ------------------------------

// A volume whose voxel values say where they are, a label of four classes.
Sample position_sample(std::array<int64_t, 3> shape) {
  Sample s;
  const int64_t n = shape[0] * shape[1] * shape[2];
  s.image = at::arange(n, at::kFloat).reshape({1, shape[0], shape[1], shape[2]});
  s.label = at::arange(n, at::kLong).remainder(4).to(at::kByte).reshape(s.image.sizes());
  return s;
}

TEST(RandAffineTest, TheIdentityGivesThePlainCropAndAnIntegerShiftTheShiftedCrop) {
  const Sample s = position_sample({12, 10, 9});
  Sample crop = s;
  crop.view = SpatialMap::identity({12, 10, 9}).cropped({3, 2, 1}, {6, 5, 4});
  const Sample plain = materialize(crop);
  for (const PaddingMode padding :
       {PaddingMode::kZeros, PaddingMode::kBorder, PaddingMode::kReflection}) {
    const Sample warped = warp_view(crop, affine_matrix(AffineParams{}), padding);
    EXPECT_FALSE(warped.view.has_value());
    EXPECT_TRUE(at::allclose(warped.image, plain.image, 0, 1e-3));
    EXPECT_TRUE(at::equal(warped.label, plain.label));
    EXPECT_EQ(warped.label.scalar_type(), at::kByte);
  }
  // MONAI's translate moves the grid through the input: output voxel j reads j + t.
  AffineParams shift;
  shift.apply = true;
  shift.translate = {2, -1, 3};
  Sample shifted = s;
  shifted.view = SpatialMap::identity({12, 10, 9}).cropped({5, 1, 4}, {6, 5, 4});
  const Sample warped = warp_view(crop, affine_matrix(shift), PaddingMode::kZeros);
  EXPECT_TRUE(at::allclose(warped.image, materialize(shifted).image, 0, 1e-3));
  EXPECT_TRUE(at::equal(warped.label, materialize(shifted).label));
}

TEST(RandAffineTest, AZoomedOutOrRotatedCropReadsTheVolumeAroundItNotPadding) {
  // The crop sits in the middle of a volume of ones: a zoom of 0.6 turned
  // reads 5/3 of its extent, all inside the volume, so no voxel is padding.
  Sample s;
  s.image = at::ones({1, 24, 24, 24});
  s.label = at::ones({1, 24, 24, 24}, at::kByte);
  s.view = SpatialMap::identity({24, 24, 24}).cropped({8, 8, 8}, {8, 8, 8});
  AffineParams p;
  p.zoom_apply = true;
  p.zoom = 0.6;
  p.apply = true;
  p.rotate = {0.7, 0.5, 0.3};
  const Sample out = warp_view(s, affine_matrix(p), PaddingMode::kZeros);
  EXPECT_TRUE(at::allclose(out.image, at::ones({1, 8, 8, 8}), 0, 1e-5));
  EXPECT_TRUE(at::equal(out.label, at::ones({1, 8, 8, 8}, at::kByte)));
  // The same crop alone (MONAI's RandAffine after the crop) pads with zeros.
  Sample alone = materialize(s);
  const Sample padded = warp_view(alone, affine_matrix(p), PaddingMode::kZeros);
  EXPECT_LT(padded.image.min().item<float>(), 0.5f);
}

TEST(RandAffineTest, DrawsAFixedCountWhetherAppliedOrNotAndAppliesWithProbability) {
  AffineOptions o;
  o.prob = 0.3;
  o.rotate = {0.5, 0.5, 0.5};
  o.scale = {0.2, 0.2, 0.2};
  o.zoom_prob = 0.6;
  o.zoom = {0.8, 1.25};
  int applied = 0, zoomed = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    StreamRng rng(seed), count(seed);
    const AffineParams p = sample_affine(o, rng);
    for (int k = 0; k < 18; ++k) count.uniform_double();  // 2 coins, 15 values, the zoom
    EXPECT_EQ(rng.next_u64(), count.next_u64()) << "seed " << seed;
    applied += p.apply;
    zoomed += p.zoom_apply;
    if (!p.apply) {
      EXPECT_EQ(p.scale, (std::array<double, 3>{1, 1, 1}));
    }
    if (p.zoom_apply) {
      EXPECT_GE(p.zoom, 0.8);
      EXPECT_LT(p.zoom, 1.25);
    }
    for (size_t d = 0; d < 3; ++d) EXPECT_LE(std::abs(p.rotate[d]), 0.5);
  }
  EXPECT_NEAR(applied / 2000.0, 0.3, 0.04);
  EXPECT_NEAR(zoomed / 2000.0, 0.6, 0.04);
}

TEST(RandAffineTest, ValidateNamesTheBadValue) {
  AffineOptions o;
  o.scale = {0.1, 1.0, 0.1};
  EXPECT_THAT([&] { o.validate(); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                         HasSubstr("scale=1 must be in [0, 1)")));
  o = AffineOptions{};
  o.zoom = {1.2, 0.9};
  EXPECT_THAT([&] { o.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("zoom=1.2,0.9")));
  o = AffineOptions{};
  o.prob = 1.5;
  EXPECT_THROW(make_rand_affine(o), std::invalid_argument);
}

TEST(RandAffineTest, InComposeItRecordsItsDrawsAndIsTheSameOnAnyThreadAndThroughTensorOps) {
  const Sample s = position_sample({14, 12, 10});
  PosNegCropOptions crop;
  crop.spatial_size = {6, 5, 4};
  crop.num_samples = 3;
  AffineOptions a;
  a.prob = 0.7;
  a.rotate = {0.4, 0.3, 0.2};
  a.shear = {0.05, 0, 0, 0.05, 0, 0};
  a.translate = {1, 1, 1};
  a.scale = {0.1, 0.1, 0.1};
  a.zoom_prob = 0.5;
  a.zoom = {0.8, 1.2};
  Rotate90Options rot;
  rot.prob = 0.5;
  rot.spatial_axes = {0, 2};
  const Compose pipeline(
      {make_rand_crop_by_pos_neg_label(crop), make_rand_affine(a), make_rand_rotate90(rot)});
  std::map<std::string, int> steps;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    const auto eager = pipeline(s, seed);
    const auto lazy = pipeline.lazy(s, seed);
    ASSERT_EQ(eager.size(), 3u);
    for (size_t k = 0; k < eager.size(); ++k) {
      const Sample m = materialize(lazy[k]);
      EXPECT_TRUE(at::equal(eager[k].image, m.image)) << "seed " << seed;
      EXPECT_TRUE(at::equal(eager[k].label, m.label)) << "seed " << seed;
      EXPECT_EQ(eager[k].image.numel(), 6 * 5 * 4);
      for (const auto& [name, drawn] : eager[k].meta.spatial) {
        ++steps[name];
        EXPECT_EQ(drawn.size(), name == "RandAffine" ? 15u : 1u);
      }
      // Another thread, the same bits.
      Sample there;
      std::thread([&] { there = pipeline(s, seed)[k]; }).join();
      EXPECT_TRUE(at::equal(there.image, eager[k].image));
      EXPECT_EQ(there.meta.spatial, eager[k].meta.spatial);
    }
  }
  EXPECT_GT(steps["RandAffine"], 5);
  EXPECT_GT(steps["RandZoom"], 5);
  EXPECT_LT(steps["RandAffine"], 36);
}

// The host kernel and the tensor-op path (the GPU's code) on random draws:
// within float32 rounding of the positions; labels apart only where a
// position falls on a half-voxel tie.
TEST(RandAffineTest, TheHostKernelAndTheTensorOpPathAgree) {
  Sample s = position_sample({20, 18, 16});
  s.image = s.image.sin() * 100.0f;  // values that vary at every voxel
  AffineOptions o;
  o.prob = 1;
  o.rotate = {0.6, 0.6, 0.6};
  o.shear = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1};
  o.translate = {4, 4, 4};
  o.scale = {0.3, 0.3, 0.3};
  o.zoom_prob = 0.5;
  o.zoom = {0.6, 1.6};
  int64_t differ = 0, voxels = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    for (const PaddingMode padding :
         {PaddingMode::kZeros, PaddingMode::kBorder, PaddingMode::kReflection}) {
      StreamRng rng(seed);
      const Matrix4 m = affine_matrix(sample_affine(o, rng));
      Sample crop = s;
      crop.view = SpatialMap::identity({20, 18, 16})
                      .cropped({static_cast<int64_t>(seed % 8), 2, 3}, {9, 8, 7})
                      .flipped(seed % 3);
      const Sample host = warp_view(crop, m, padding);
      const Sample ops = warp_view(crop, m, padding, Gather::kTensorOps);
      EXPECT_TRUE(at::allclose(host.image, ops.image, 0, 2e-3)) << "seed " << seed;
      differ += host.label.ne(ops.label).sum().item<int64_t>();
      voxels += host.label.numel();
    }
  }
  EXPECT_LE(differ, voxels / 1000) << differ << " of " << voxels;
}

// Rand3DElastic is RandAffine's step with one coin for both: a RandAffine's
// stream is as it was (18 draws), an elastic one draws magnitude, sigma and
// the field's key after them; the coin is elastic_prob's and decides the
// affine too.
TEST(Rand3DElasticTest, DrawsAfterRandAffinesAndOneCoinDecidesTheOffsetsAndTheAffine) {
  AffineOptions o;
  o.elastic_prob = 0.4;
  o.rotate = {0.5, 0.5, 0.5};
  o.elastic_sigma = {2.0, 3.0};
  o.elastic_magnitude = {10.0, 20.0};
  int applied = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    StreamRng rng(seed), count(seed);
    const AffineParams p = sample_affine(o, rng);
    for (int k = 0; k < 20; ++k)
      count.uniform_double();  // 2 coins, 15 values, zoom, magnitude, sigma
    const uint64_t key = count.next_u64();
    EXPECT_EQ(rng.next_u64(), count.next_u64()) << "seed " << seed;
    EXPECT_EQ(p.elastic, p.apply) << "seed " << seed;
    applied += p.elastic;
    if (p.elastic) {
      EXPECT_EQ(p.field_key, key);
      EXPECT_GE(p.magnitude, 10.0);
      EXPECT_LT(p.magnitude, 20.0);
      EXPECT_GE(p.sigma, 2.0);
      EXPECT_LT(p.sigma, 3.0);
    } else {
      EXPECT_EQ(p.rotate, (std::array<double, 3>{0, 0, 0}));
    }
  }
  EXPECT_NEAR(applied / 2000.0, 0.4, 0.04);
  // Without elastic_prob the same options draw as RandAffine always did.
  o.elastic_prob = 0;
  o.prob = 0.4;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    StreamRng rng(seed), count(seed);
    const AffineParams p = sample_affine(o, rng);
    for (int k = 0; k < 18; ++k) count.uniform_double();
    EXPECT_EQ(rng.next_u64(), count.next_u64()) << "seed " << seed;
    EXPECT_FALSE(p.elastic);
  }
}

TEST(Rand3DElasticTest, ValidateNamesTheBadValueAndRefusesBothProbs) {
  AffineOptions o;
  o.prob = 0.5;
  o.elastic_prob = 0.5;
  EXPECT_THAT([&] { o.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("RandAffine: prob=0.5 and Rand3DElastic: prob=0.5 are one step")));
  o = AffineOptions{};
  o.elastic_sigma = {0.0, 2.0};
  EXPECT_THAT([&] { o.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("sigma=0,2")));
  o = AffineOptions{};
  o.elastic_magnitude = {5.0, 20000.0};
  EXPECT_THAT([&] { o.validate(); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("magnitude=5,20000")));
  o = AffineOptions{};
  o.elastic_prob = 1.5;
  EXPECT_THROW(make_rand_affine(o), std::invalid_argument);
}

// The offset field comes from its key and each value's index alone: in
// [-1, 1), a smaller field is a prefix of a larger one, another key another
// field; the offsets are MONAI's filter of it times the magnitude.
TEST(Rand3DElasticTest, TheFieldIsUniformFromItsKeyAndTheOffsetsItsSmoothedScaledSelf) {
  const c10::Device cpu(c10::kCPU);
  const at::Tensor f = uniform_field({3, 8, 7, 6}, 42, cpu);
  ASSERT_EQ(f.scalar_type(), at::kFloat);
  EXPECT_GE(f.min().item<float>(), -1.0f);
  EXPECT_LE(f.max().item<float>(), 1.0f);  // float32 may round the largest up to 1
  EXPECT_NEAR(f.mean().item<double>(), 0.0, 0.1);
  EXPECT_NEAR(f.std().item<double>(), 1.0 / std::sqrt(3.0), 0.05);  // uniform(-1, 1)
  EXPECT_TRUE(at::equal(uniform_field({100}, 42, cpu), f.reshape(-1).narrow(0, 0, 100)));
  EXPECT_FALSE(at::equal(uniform_field({3, 8, 7, 6}, 43, cpu), f));
  const at::Tensor off = elastic_offsets(f, 1.5, 12.0);
  EXPECT_TRUE(at::equal(off, gaussian_smooth(f, {1.5, 1.5, 1.5}, 3.0) * 12.0f));
  EXPECT_LT(off.abs().max().item<double>(), 12.0);  // smoothing shrinks it
  EXPECT_THROW(elastic_offsets(f.narrow(0, 0, 2), 1.5, 12.0), std::invalid_argument);
}

// In a pipeline: the crop's own shape, reproducible from the seed on any
// thread, recorded (magnitude, sigma) with its affine, and the tensor-op path
// (the GPU's code) within float32 rounding of the host kernel's.
TEST(Rand3DElasticTest, InComposeItIsReproducibleRecordedAndTheTensorOpPathAgrees) {
  Sample s = position_sample({16, 14, 12});
  s.image = s.image.sin() * 100.0f;
  PosNegCropOptions crop;
  crop.spatial_size = {7, 6, 5};
  crop.num_samples = 2;
  AffineOptions a;
  a.elastic_prob = 0.8;
  a.rotate = {0.3, 0.2, 0.1};
  a.scale = {0.1, 0.1, 0.1};
  a.elastic_sigma = {1.0, 2.0};
  a.elastic_magnitude = {5.0, 15.0};
  const Compose pipeline({make_rand_crop_by_pos_neg_label(crop), make_rand_affine(a)});
  EXPECT_EQ(make_rand_affine(a)->name(), "Rand3DElastic");
  int elastic = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const auto eager = pipeline(s, seed);
    ASSERT_EQ(eager.size(), 2u);
    for (size_t k = 0; k < eager.size(); ++k) {
      EXPECT_EQ(eager[k].image.sizes().vec(), (std::vector<int64_t>{1, 7, 6, 5}));
      Sample there;
      std::thread([&] { there = pipeline(s, seed)[k]; }).join();
      EXPECT_TRUE(at::equal(there.image, eager[k].image)) << "seed " << seed;
      EXPECT_TRUE(at::equal(there.label, eager[k].label)) << "seed " << seed;
      for (const auto& [name, drawn] : eager[k].meta.spatial) {
        if (name != "Rand3DElastic") continue;
        ++elastic;
        ASSERT_EQ(drawn.size(), 2u);
        EXPECT_GE(drawn[0], 5.0);
        EXPECT_LT(drawn[1], 2.0);
      }
    }
  }
  EXPECT_GT(elastic, 10);
  // The host kernel against the tensor ops on the same offsets.
  for (uint64_t seed = 0; seed < 8; ++seed) {
    StreamRng rng(seed);
    AffineParams p = sample_affine(a, rng);
    Sample c = s;
    c.view = SpatialMap::identity({16, 14, 12})
                 .cropped({3, 2, static_cast<int64_t>(seed % 4)}, {9, 8, 7});
    const at::Tensor off =
        elastic_offsets(uniform_field({3, 9, 8, 7}, seed, c10::Device(c10::kCPU)), 1.5, 10.0);
    for (const PaddingMode padding : {PaddingMode::kZeros, PaddingMode::kReflection}) {
      const Sample host = warp_view(c, affine_matrix(p), padding, Gather::kAuto, off);
      const Sample ops = warp_view(c, affine_matrix(p), padding, Gather::kTensorOps, off);
      EXPECT_TRUE(at::allclose(host.image, ops.image, 0, 2e-3)) << "seed " << seed;
      EXPECT_LE(host.label.ne(ops.label).sum().item<int64_t>(), host.label.numel() / 200);
      const Sample plain = warp_view(c, affine_matrix(p), padding);
      EXPECT_FALSE(at::equal(plain.image, host.image)) << "the offsets moved nothing";
    }
  }
  EXPECT_THROW(warp_view(s, Matrix4{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1},
                         PaddingMode::kZeros, Gather::kAuto, at::zeros({3, 2, 2, 2})),
               std::invalid_argument);
}

// The GPU cache's path for Rand3DElastic (skipped without a GPU): the field
// made on the device equals the host's, and so does the warp within rounding.
TEST(Rand3DElasticTest, OnTheGpuTheFieldAndTheWarpMatchTheHosts) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const c10::Device gpu(c10::kCUDA, 0);
  const at::Tensor field = uniform_field({3, 7, 6, 5}, 7, c10::Device(c10::kCPU));
  ASSERT_TRUE(at::equal(uniform_field({3, 7, 6, 5}, 7, gpu).cpu(), field));
  Sample host = position_sample({14, 12, 10});
  host.view = SpatialMap::identity({14, 12, 10}).cropped({4, 3, 2}, {7, 6, 5});
  Sample device = host;
  device.image = host.image.to(gpu);
  device.label = host.label.to(gpu);
  AffineParams p;
  p.apply = true;
  p.rotate = {0.3, -0.2, 0.1};
  const at::Tensor off = elastic_offsets(field, 1.5, 10.0);
  const Sample a = warp_view(host, affine_matrix(p), PaddingMode::kBorder, Gather::kAuto, off);
  const Sample b = warp_view(device, affine_matrix(p), PaddingMode::kBorder, Gather::kAuto,
                             elastic_offsets(field.to(gpu), 1.5, 10.0));
  ASSERT_TRUE(b.image.is_cuda());
  EXPECT_TRUE(at::allclose(b.image.cpu(), a.image, 1e-5, 1e-3));
  EXPECT_LE(b.label.cpu().ne(a.label).sum().item<int64_t>(), a.label.numel() / 200);
}

// The GPU cache's path (skipped without a GPU): the same grid, sampled on the
// device, within float32 rounding of the host's; the label exactly.
TEST(RandAffineTest, OnTheGpuTheWarpMatchesTheHosts) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  Sample host = position_sample({14, 12, 10});
  host.view = SpatialMap::identity({14, 12, 10}).cropped({4, 3, 2}, {7, 6, 5});
  Sample device = host;
  device.image = host.image.to(c10::Device(c10::kCUDA, 0));
  device.label = host.label.to(c10::Device(c10::kCUDA, 0));
  AffineParams p;
  p.apply = true;
  p.rotate = {0.3, -0.2, 0.1};
  p.scale = {1.1, 0.9, 1.05};
  p.zoom_apply = true;
  p.zoom = 1.2;
  const Sample a = warp_view(host, affine_matrix(p), PaddingMode::kBorder);
  const Sample b = warp_view(device, affine_matrix(p), PaddingMode::kBorder);
  ASSERT_TRUE(b.image.is_cuda());
  EXPECT_TRUE(at::allclose(b.image.cpu(), a.image, 1e-5, 1e-3));
  EXPECT_TRUE(at::equal(b.label.cpu(), a.label));
}

}  // namespace
}  // namespace volshard
