// inference.cpp: sliding-window inference, its Gaussian importance map, test-time
// mirroring and the largest connected components, against MONAI's and nnU-Net's
// own outputs (oracle/make_sliding_window.py).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "volshard/transforms/inference.h"

namespace volshard {
namespace {

// sliding_window.json (make_sliding_window.py): MONAI's and nnU-Net's own
// outputs for a predictor whose output depends on the voxel's place in its
// window, so padding, window starts, blending and flips all show.
nlohmann::json inference_fixture() {
  std::ifstream in(std::string(VOLSHARD_TRANSFORMS_ORACLE_DIR) + "/sliding_window.json");
  EXPECT_TRUE(in);
  return nlohmann::json::parse(in);
}

at::Tensor fixture_tensor(const nlohmann::json& values, const std::vector<int64_t>& shape) {
  return at::tensor(values.get<std::vector<float>>()).view(shape);
}

at::Tensor place_predictor(const at::Tensor& x) {
  const int64_t n = x.size(0), a = x.size(2), b = x.size(3), c = x.size(4);
  const at::Tensor i = at::arange(a, x.options()).view({1, 1, a, 1, 1});
  const at::Tensor j = at::arange(b, x.options()).view({1, 1, 1, b, 1});
  const at::Tensor k = at::arange(c, x.options()).view({1, 1, 1, 1, c});
  return at::cat({2 * x + i, (j - k).expand({n, 1, a, b, c})}, 1);
}

// monai.inferers.sliding_window_inference, mode "constant" and "gaussian"
// (sigma_scale one value and per axis), including its symmetric padding.
TEST(InferenceTest, SlidingWindowEqualsMonaisInBothBlendModesIncludingItsSymmetricPadding) {
  const nlohmann::json fixture = inference_fixture();
  int64_t gaussian = 0;
  ASSERT_EQ(fixture.at("cases").size(), 6u);
  for (const nlohmann::json& c : fixture.at("cases")) {
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    const auto roi = c.at("roi").get<std::vector<int64_t>>();
    SCOPED_TRACE(c.at("shape").dump() + " roi " + c.at("roi").dump() + " " + c.at("mode").dump());
    const at::Tensor image = fixture_tensor(c.at("image"), {1, 1, shape[0], shape[1], shape[2]});
    SlidingWindowOptions o;
    o.roi = {roi[0], roi[1], roi[2]};
    o.overlap = c.at("overlap").get<double>();
    o.sw_batch_size = c.at("sw_batch_size").get<int64_t>();
    o.blend = c.at("mode") == "gaussian" ? BlendMode::kGaussian : BlendMode::kConstant;
    o.sigma_scale = c.at("sigma_scale").get<std::array<double, 3>>();
    gaussian += o.blend == BlendMode::kGaussian;
    const at::Tensor got = sliding_window_inference(image, o, place_predictor);
    const at::Tensor want = fixture_tensor(c.at("output"), {1, 2, shape[0], shape[1], shape[2]});
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-5);
  }
  EXPECT_EQ(gaussian, 3);
}

// compute_importance_map(roi, "gaussian", sigma_scale): the same float32 bits
// (the same ATen ops in the same order), and the 96^3 map's sum and extremes.
TEST(InferenceTest, TheGaussianImportanceMapIsMonaisBitForBit) {
  const nlohmann::json fixture = inference_fixture();
  ASSERT_EQ(fixture.at("importance_maps").size(), 4u);
  for (const nlohmann::json& m : fixture.at("importance_maps")) {
    const auto roi = m.at("roi").get<std::array<int64_t, 3>>();
    SCOPED_TRACE(m.at("roi").dump() + " sigma_scale " + m.at("sigma_scale").dump());
    const at::Tensor got =
        importance_map(roi, BlendMode::kGaussian, m.at("sigma_scale").get<std::array<double, 3>>());
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{roi[0], roi[1], roi[2]}));
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    if (!m.at("map").is_null()) {
      const auto want = m.at("map").get<std::vector<float>>();
      const at::Tensor flat = got.contiguous().view(-1);
      int64_t differ = 0;
      for (int64_t v = 0; v < flat.numel(); ++v)
        differ += flat[v].item<float>() != want[static_cast<size_t>(v)];
      EXPECT_EQ(differ, 0);
    }
    EXPECT_EQ(got.min().item<float>(), m.at("min").get<float>());
    EXPECT_EQ(got.max().item<float>(), m.at("max").get<float>());
    EXPECT_EQ(got[roi[0] / 2][roi[1] / 2][roi[2] / 2].item<float>(), m.at("centre").get<float>());
    EXPECT_NEAR(got.to(at::kDouble).sum().item<double>(), m.at("sum").get<double>(), 1e-6);
  }
  // Constant: ones.
  EXPECT_TRUE(importance_map({3, 4, 5}, BlendMode::kConstant, {0.125, 0.125, 0.125})
                  .equal(at::ones({3, 4, 5})));
}

// nnU-Net v2's _internal_maybe_mirror_and_predict around the same predictor:
// all three axes (8 passes), one, and two.
TEST(InferenceTest, MirroringEqualsNnUNetsTestTimeMirroring) {
  const nlohmann::json fixture = inference_fixture();
  ASSERT_EQ(fixture.at("mirrored").size(), 3u);
  for (const nlohmann::json& c : fixture.at("mirrored")) {
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    SCOPED_TRACE("axes " + c.at("axes").dump());
    const at::Tensor image = fixture_tensor(c.at("image"), {1, 1, shape[0], shape[1], shape[2]});
    int64_t calls = 0;
    const Predictor counted = [&calls](const at::Tensor& x) {
      ++calls;
      return place_predictor(x);
    };
    const auto axes = c.at("axes").get<std::vector<int64_t>>();
    const at::Tensor got = mirrored(counted, axes)(image);
    const at::Tensor want = fixture_tensor(c.at("output"), {1, 2, shape[0], shape[1], shape[2]});
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-6);
    EXPECT_EQ(calls, int64_t{1} << axes.size());
  }
  // No axes: the predictor itself; a bad or repeated axis is refused by name.
  const at::Tensor x = at::rand({1, 1, 4, 3, 2});
  EXPECT_TRUE(mirrored(place_predictor, {})(x).equal(place_predictor(x)));
  // A predictor that hands back its input (an identity) leaves the caller's tensor as it was.
  const at::Tensor before = x.clone();
  const at::Tensor same = mirrored([](const at::Tensor& t) { return t; }, {0, 2})(x);
  EXPECT_TRUE(x.equal(before));
  EXPECT_TRUE(same.allclose(x));
  EXPECT_THAT([] { (void)mirrored(place_predictor, {3}); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  ::testing::HasSubstr("axis 3 must be 0 (X), 1 (Y) or 2 (Z)")));
  EXPECT_THAT(
      [] {
        (void)mirrored(place_predictor, {1, 1});
      },
      ::testing::ThrowsMessage<std::invalid_argument>(
          ::testing::HasSubstr("axis 1 is named twice")));
}

// monai.transforms.KeepLargestConnectedComponent (independent, connectivity
// None: 26 neighbours) on masks and a three-class label map.
TEST(InferenceTest, LargestComponentsEqualMonaisKeepLargestConnectedComponent) {
  const nlohmann::json fixture = inference_fixture();
  ASSERT_EQ(fixture.at("largest_component").size(), 3u);
  for (const nlohmann::json& c : fixture.at("largest_component")) {
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    SCOPED_TRACE(c.at("shape").dump() + " classes " + c.at("classes").dump());
    const at::Tensor labels =
        at::tensor(c.at("labels").get<std::vector<int64_t>>()).to(at::kByte).view(shape);
    const at::Tensor want =
        at::tensor(c.at("output").get<std::vector<int64_t>>()).to(at::kByte).view(shape);
    const at::Tensor got = keep_largest_components(labels);
    EXPECT_EQ(got.scalar_type(), at::kByte);
    EXPECT_TRUE(got.equal(want));
    EXPECT_LT(got.count_nonzero().item<int64_t>(), labels.count_nonzero().item<int64_t>());
  }
  // Diagonal neighbours join; of two equal components the first in C order stays.
  at::Tensor mask = at::zeros({4, 4, 4}, at::kBool);
  mask[0][0][0] = true;
  mask[1][1][1] = true;  // a corner's neighbour: one component of 2
  mask[3][3][2] = true;
  mask[3][3][3] = true;  // another of 2, later in C order
  const at::Tensor kept = largest_component(mask);
  EXPECT_EQ(kept.count_nonzero().item<int64_t>(), 2);
  EXPECT_TRUE(kept[1][1][1].item<bool>());
  EXPECT_FALSE(kept[3][3][3].item<bool>());
}

}  // namespace
}  // namespace volshard
