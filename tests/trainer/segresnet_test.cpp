// MONAI parity of SegResNet (the BraTS tutorial's network): state_dict keys,
// shapes and order of the tutorial's configuration, output, loss and
// gradients on a MONAI-made fixture, and what the options refuse.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "model_parity.h"
#include "volshard/trainer/model.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = VOLSHARD_TRAINER_FIXTURES;

ModelOptions brats_tutorial() {
  ModelOptions o;
  o.kind = ModelKind::kSegResNet;
  o.init_filters = 16;
  o.in_channels = 4;
  o.out_channels = 3;
  o.dropout = 0.2;
  return o;  // blocks_down 1,2,2,4 and blocks_up 1,1,1, group norm of 8: MONAI's defaults
}

TEST(SegResNetTest, BratsTutorialConfigurationHasMonaisStateDictKeysShapesAndOrder) {
  const Model net(brats_tutorial());
  const auto expected = test_support::read_listing(kFixtures + "/monai_segresnet_state_dict.txt");
  ASSERT_EQ(expected.size(), 83u);
  EXPECT_EQ(test_support::keys_and_shapes(net), expected);
  EXPECT_EQ(net.num_parameters(), 4702227);
  EXPECT_EQ(net.options().resolved_norm(), NormKind::kGroup);  // auto: MONAI's default
}

TEST(SegResNetParityTest, OutputLossAndGradientsMatchMonaiWithinTolerance) {
  const std::string dir = kFixtures + "/segresnet_parity_small";
  ModelOptions o;
  o.kind = ModelKind::kSegResNet;
  o.init_filters = 8;
  o.in_channels = 4;
  o.out_channels = 3;
  o.blocks_down = {1, 2, 1};
  o.blocks_up = {1, 1};
  DiceLossOptions d;  // the BraTS tutorial's DiceLoss
  d.sigmoid = true;
  d.squared_pred = true;
  d.smooth_nr = 0;
  d.smooth_dr = 1e-5;
  test_support::expect_parity(dir, test_support::run_parity(dir, o, d), 0.35490188002586365);
}

TEST(SegResNetTest, GroupNormGivesTheSameOutputInTrainingAndEvaluation) {
  ModelOptions o;
  o.kind = ModelKind::kSegResNet;
  o.blocks_down = {1, 1};
  o.blocks_up = {1};
  Model net(o, 5);
  const at::Tensor x = at::rand({1, 1, 8, 8, 8});
  c10::NoGradGuard no_grad;
  const at::Tensor a = net.forward(x);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{1, 1, 8, 8, 8}));
  net.train(false);
  EXPECT_TRUE(at::equal(a, net.forward(x)));
}

TEST(SegResNetTest, SizesAreMultiplesOfTwoToTheLevelsBelowTheTop) {
  ModelOptions o;
  o.kind = ModelKind::kSegResNet;
  EXPECT_EQ(o.size_multiple(), 8);  // 4 levels: 3 halvings
  try {
    o.check_spatial_size({12, 16, 16}, "train: --crop");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("multiple of 8 (the SegResNet's down-sampling)"));
  }
  o.blocks_down = {1, 2};
  o.blocks_up = {1};
  EXPECT_EQ(o.size_multiple(), 2);
}

TEST(SegResNetTest, RejectsBadOptionsNamingTheField) {
  ModelOptions o;
  o.kind = ModelKind::kSegResNet;
  o.blocks_up = {1, 1};
  try {
    o.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("SegResNet: blocks_up=1,1 has 2 entries"));
  }
  o = ModelOptions{};
  o.kind = ModelKind::kSegResNet;
  o.init_filters = 12;
  try {
    o.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("init_filters=12 is not a multiple of num_groups=8"));
  }
  o.norm = NormKind::kInstance;  // any width with instance norm
  EXPECT_NO_THROW(o.validate());
}

TEST(SegResNetTest, UNetWeightsAreRefusedNamingTheKey) {
  ModelOptions unet;
  unet.channels = {8, 16};
  unet.strides = {2};
  ModelOptions segresnet;
  segresnet.kind = ModelKind::kSegResNet;
  Model net(segresnet);
  try {
    net.load_state_dict(Model(unet).state_dict());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("SegResNet::load_state_dict: missing key 'convInit.conv.weight'"));
  }
}

TEST(SegResNetTest, InitialisationDependsOnlyOnTheSeedWithinPyTorchsBounds) {
  ModelOptions o;
  o.kind = ModelKind::kSegResNet;
  const Model a(o, 1), b(o, 1), c(o, 2);
  const auto sa = a.state_dict(), sb = b.state_dict(), sc = c.state_dict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(at::equal(sa[i].second, sb[i].second));
  EXPECT_FALSE(at::equal(sa[0].second, sc[0].second));
  EXPECT_EQ(sa[0].first, "convInit.conv.weight");  // (8, 1, 3, 3, 3): fan_in 27
  EXPECT_LE(sa[0].second.abs().max().item<double>(), 1.0 / std::sqrt(27.0));
  EXPECT_EQ(sa[1].first, "down_layers.0.1.norm1.weight");
  EXPECT_TRUE(at::equal(sa[1].second, at::ones({8})));
}

}  // namespace
}  // namespace volshard
