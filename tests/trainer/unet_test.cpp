// MONAI parity of the UNet, DiceLoss and DiceCELoss: module tree (state_dict
// keys and shapes), and output, loss and gradients on MONAI-made fixtures.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "model_parity.h"
#include "volshard/trainer/loss.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/serialize.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = VOLSHARD_TRAINER_FIXTURES;

using test_support::keys_and_shapes;

TEST(UNetTest, TutorialConfigurationHasMonaisStateDictKeysShapesAndOrder) {
  const Model net(ModelOptions{});
  const auto expected = test_support::read_listing(kFixtures + "/monai_unet_state_dict.txt");
  ASSERT_EQ(expected.size(), 63u);
  EXPECT_EQ(keys_and_shapes(net), expected);
  EXPECT_EQ(net.num_parameters(), 4805534);
}

TEST(UNetTest, NoResidualUnitsGivesPlainConvolutionsAsMonai) {
  ModelOptions o;
  o.channels = {4, 8, 16};
  o.strides = {2, 2};
  o.num_res_units = 0;
  Model net(o);
  // MONAI: down = Convolution, bottom = Convolution(stride 1), up =
  // Convolution(transposed), the top one conv only.
  const std::vector<std::pair<std::string, std::string>> expected{
      {"model.0.conv.weight", "(4, 1, 3, 3, 3)"},
      {"model.0.conv.bias", "(4,)"},
      {"model.0.adn.A.weight", "(1,)"},
      {"model.1.submodule.0.conv.weight", "(8, 4, 3, 3, 3)"},
      {"model.1.submodule.0.conv.bias", "(8,)"},
      {"model.1.submodule.0.adn.A.weight", "(1,)"},
      {"model.1.submodule.1.submodule.conv.weight", "(16, 8, 3, 3, 3)"},
      {"model.1.submodule.1.submodule.conv.bias", "(16,)"},
      {"model.1.submodule.1.submodule.adn.A.weight", "(1,)"},
      {"model.1.submodule.2.conv.weight", "(24, 4, 3, 3, 3)"},
      {"model.1.submodule.2.conv.bias", "(4,)"},
      {"model.1.submodule.2.adn.A.weight", "(1,)"},
      {"model.2.conv.weight", "(8, 1, 3, 3, 3)"},
      {"model.2.conv.bias", "(1,)"},
  };
  EXPECT_EQ(keys_and_shapes(net), expected);
  EXPECT_EQ(net.forward(at::rand({1, 1, 16, 16, 16})).sizes(),
            (std::vector<int64_t>{1, 1, 16, 16, 16}));
}

TEST(UNetTest, OneResidualUnitHasOneSubunitPerLayer) {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  o.num_res_units = 1;
  const Model net(o);
  const std::vector<std::pair<std::string, std::string>> expected{
      {"model.0.conv.unit0.conv.weight", "(4, 1, 3, 3, 3)"},
      {"model.0.conv.unit0.conv.bias", "(4,)"},
      {"model.0.conv.unit0.adn.A.weight", "(1,)"},
      {"model.0.residual.weight", "(4, 1, 3, 3, 3)"},
      {"model.0.residual.bias", "(4,)"},
      {"model.1.submodule.conv.unit0.conv.weight", "(8, 4, 3, 3, 3)"},
      {"model.1.submodule.conv.unit0.conv.bias", "(8,)"},
      {"model.1.submodule.conv.unit0.adn.A.weight", "(1,)"},
      {"model.1.submodule.residual.weight", "(8, 4, 1, 1, 1)"},
      {"model.1.submodule.residual.bias", "(8,)"},
      {"model.2.0.conv.weight", "(12, 1, 3, 3, 3)"},
      {"model.2.0.conv.bias", "(1,)"},
      {"model.2.0.adn.A.weight", "(1,)"},
      {"model.2.1.conv.unit0.conv.weight", "(1, 1, 3, 3, 3)"},
      {"model.2.1.conv.unit0.conv.bias", "(1,)"},
  };
  EXPECT_EQ(keys_and_shapes(net), expected);
}

TEST(UNetTest, BatchNormAddsMonaisBatchNormKeysAndBuffers) {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  o.num_res_units = 0;
  o.norm = NormKind::kBatch;
  const Model net(o);
  const auto keys = keys_and_shapes(net);
  ASSERT_GE(keys.size(), 8u);
  EXPECT_EQ(keys[2].first, "model.0.adn.N.weight");
  EXPECT_EQ(keys[3].first, "model.0.adn.N.bias");
  EXPECT_EQ(keys[4].first, "model.0.adn.N.running_mean");
  EXPECT_EQ(keys[5].first, "model.0.adn.N.running_var");
  EXPECT_EQ(keys[6].first, "model.0.adn.N.num_batches_tracked");
  EXPECT_EQ(keys[7].first, "model.0.adn.A.weight");
}

TEST(UNetParityTest, OutputLossAndGradientsMatchMonaiWithinTolerance) {
  const std::string dir = kFixtures + "/unet_parity_small";
  ModelOptions o;
  o.channels = {4, 8, 16};
  o.strides = {2, 2};
  o.num_res_units = 2;
  DiceLossOptions d;
  d.sigmoid = true;
  test_support::expect_parity(dir, test_support::run_parity(dir, o, d), 0.5020731687545776);
}

TEST(UNetParityTest, TrainAndEvalGiveTheSameOutputWithInstanceNorm) {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  Model net(o, 5);
  const at::Tensor x = at::rand({1, 1, 16, 16, 16});
  c10::NoGradGuard no_grad;
  const at::Tensor a = net.forward(x);
  net.train(false);
  EXPECT_TRUE(at::equal(a, net.forward(x)));
}

TEST(UNetTest, InitialisationDependsOnlyOnTheSeed) {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  const Model a(o, 1), b(o, 1), c(o, 2);
  const auto sa = a.state_dict(), sb = b.state_dict(), sc = c.state_dict();
  bool any_different = false;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_TRUE(at::equal(sa[i].second, sb[i].second)) << sa[i].first;
    any_different = any_different || !at::equal(sa[i].second, sc[i].second);
  }
  EXPECT_TRUE(any_different);
  // PyTorch's default bounds: conv weights U(+-1/sqrt(fan_in)), PReLU 0.25.
  const at::Tensor w = sa[0].second;  // (4, 1, 3, 3, 3): fan_in 27
  EXPECT_LE(w.abs().max().item<double>(), 1.0 / std::sqrt(27.0));
  EXPECT_EQ(sa[2].second.item<float>(), 0.25f);
}

TEST(UNetTest, RejectsSpatialSizesThatAreNotMultiplesOfTheStrideProduct) {
  Model net(ModelOptions{});
  try {
    net.forward(at::zeros({1, 1, 72, 96, 96}));
    FAIL() << "72 is not a multiple of 16";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("72x96x96"));
    EXPECT_THAT(e.what(), HasSubstr("multiple of 16"));
  }
  EXPECT_THROW(ModelOptions{}.check_spatial_size({100, 96, 96}, "crop"), std::invalid_argument);
  EXPECT_NO_THROW(ModelOptions{}.check_spatial_size({96, 96, 96}, "crop"));
}

TEST(UNetTest, RejectsBadOptionsNamingTheField) {
  ModelOptions o;
  o.strides = {2, 2};
  try {
    o.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("strides"));
  }
  o = ModelOptions{};
  o.dropout = 1.0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = ModelOptions{};
  o.norm = NormKind::kGroup;
  o.num_groups = 3;
  try {
    o.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("channels[0]=16 is not a multiple of num_groups=3"));
  }
}

TEST(UNetTest, LoadStateDictNamesTheMissingOrMisshapedKeyAndCopiesNothing) {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  Model net(o, 1);
  const Model other(o, 2);
  NamedTensors state = other.state_dict();
  const at::Tensor before = net.state_dict()[0].second.clone();
  state.back().second = at::zeros({3});
  try {
    net.load_state_dict(state);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr(state.back().first));
  }
  EXPECT_TRUE(at::equal(net.state_dict()[0].second, before));
  state.pop_back();
  EXPECT_THROW(net.load_state_dict(state), std::invalid_argument);
  EXPECT_NO_THROW(net.load_state_dict(state, /*strict=*/false));
}

TEST(SerializeTest, ReadsAnOrderedDictStateDictAsPythonSavesIt) {
  // torch.save(model.state_dict()) writes an OrderedDict with _metadata,
  // which LibTorch 1.13's own unpickler cannot read.
  const NamedTensors got = load_tensor_dict(kFixtures + "/ordered_state_dict.pt");
  std::ifstream in(kFixtures + "/ordered_state_dict.txt");
  std::string line;
  size_t i = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, shape;
    double sum = 0;
    std::getline(fields, key, '\t');
    std::getline(fields, shape, '\t');
    fields >> sum;
    ASSERT_LT(i, got.size());
    EXPECT_EQ(got[i].first, key);
    std::string mine;
    for (int64_t d = 0; d < got[i].second.dim(); ++d)
      mine += (d ? "," : "") + std::to_string(got[i].second.size(d));
    EXPECT_EQ(mine, shape) << key;
    EXPECT_NEAR(got[i].second.to(at::kDouble).sum().item<double>(), sum, 1e-7) << key;
    ++i;
  }
  EXPECT_EQ(i, got.size());
  EXPECT_EQ(got[3].second.scalar_type(), at::kLong);
  EXPECT_EQ(got[4].second[0][1].item<double>(), 3.0);  // the transposed view kept its strides
  EXPECT_EQ(got[5].second.scalar_type(), at::kHalf);
}

TEST(SerializeTest, OurStateDictRoundTripsAndBadFilesNameThePath) {
  ModelOptions o;
  o.channels = {4, 8};
  o.strides = {2};
  const Model net(o, 3);
  const auto path = std::string(::testing::TempDir()) + "/volshard_sd.pt";
  save_tensor_dict(path, net.state_dict());
  const NamedTensors back = load_tensor_dict(path);
  ASSERT_EQ(back.size(), net.state_dict().size());
  for (size_t i = 0; i < back.size(); ++i)
    EXPECT_TRUE(at::equal(back[i].second, net.state_dict()[i].second));
  { std::ofstream(path, std::ios::trunc) << "garbage"; }
  try {
    load_tensor_dict(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

// ---- DiceLoss -------------------------------------------------------------

TEST(DiceLossTest, MatchesTheFormulaForEveryOption) {
  const at::Tensor x = at::randn({2, 3, 4, 4, 4}, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor g =
      (at::rand({2, 3, 4, 4, 4}, at::TensorOptions().dtype(at::kDouble)) > 0.5).to(at::kDouble);
  for (int squared = 0; squared < 2; ++squared) {
    for (int jaccard = 0; jaccard < 2; ++jaccard) {
      for (int batch = 0; batch < 2; ++batch) {
        DiceLossOptions o;
        o.sigmoid = true;
        o.squared_pred = squared;
        o.jaccard = jaccard;
        o.batch = batch;
        o.reduction = Reduction::kNone;
        const at::Tensor p = at::sigmoid(x);
        const std::vector<int64_t> dims =
            batch ? std::vector<int64_t>{0, 2, 3, 4} : std::vector<int64_t>{2, 3, 4};
        const at::Tensor i = (p * g).sum(dims);
        const at::Tensor ps = squared ? (p * p).sum(dims) : p.sum(dims);
        const at::Tensor gs = squared ? (g * g).sum(dims) : g.sum(dims);
        at::Tensor den = ps + gs;
        if (jaccard) den = 2.0 * (den - i);
        const at::Tensor expected = 1.0 - (2.0 * i + 1e-5) / (den + 1e-5);
        const at::Tensor got = dice_loss(x, g, o);
        EXPECT_EQ(got.dim(), batch ? 4 : 5);  // MONAI: C x 1 x 1 x 1 with batch
        EXPECT_TRUE(at::allclose(got.flatten(), expected.flatten(), 1e-12, 1e-12));
        o.reduction = Reduction::kMean;
        EXPECT_NEAR(dice_loss(x, g, o).item<double>(), expected.mean().item<double>(), 1e-12);
        o.reduction = Reduction::kSum;
        EXPECT_NEAR(dice_loss(x, g, o).item<double>(), expected.sum().item<double>(), 1e-12);
      }
    }
  }
}

TEST(DiceLossTest, SoftmaxOneHotAndNoBackgroundDropChannelZero) {
  const at::Tensor x = at::randn({2, 3, 4, 4, 4}, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor classes =
      at::randint(0, 3, {2, 1, 4, 4, 4}, at::TensorOptions().dtype(at::kDouble));
  DiceLossOptions o;
  o.softmax = true;
  o.to_onehot_y = true;
  o.include_background = false;
  const at::Tensor p = at::softmax(x, 1).narrow(1, 1, 2);
  const at::Tensor g = at::one_hot(classes.select(1, 0).to(at::kLong), 3)
                           .movedim(-1, 1)
                           .to(at::kDouble)
                           .narrow(1, 1, 2);
  const std::vector<int64_t> dims{2, 3, 4};
  const at::Tensor expected =
      1.0 - (2.0 * (p * g).sum(dims) + 1e-5) / (p.sum(dims) + g.sum(dims) + 1e-5);
  EXPECT_NEAR(dice_loss(x, classes, o).item<double>(), expected.mean().item<double>(), 1e-12);
}

TEST(DiceLossTest, RejectsMismatchedShapesNamingBoth) {
  try {
    dice_loss(at::zeros({1, 1, 4, 4, 4}), at::zeros({1, 1, 4, 4, 5}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("[1, 1, 4, 4, 5]"));
    EXPECT_THAT(e.what(), HasSubstr("[1, 1, 4, 4, 4]"));
  }
  DiceLossOptions o;
  o.sigmoid = o.softmax = true;
  EXPECT_THROW(dice_loss(at::zeros({1, 1, 4, 4, 4}), at::zeros({1, 1, 4, 4, 4}), o),
               std::invalid_argument);
}

// ---- DiceCELoss and the trainer's loss options -----------------------------

// Every case of loss_parity.json (make_loss_parity.py: MONAI's DiceLoss and
// DiceCELoss) through segmentation_loss, as the trainer's step calls it with
// --loss, --lambda-dice, --lambda-ce, --include-background, --squared-pred,
// --smooth-nr, --smooth-dr: the value and the gradient of the logits.
TEST(DiceCELossTest, TheTrainersLossMatchesMonaiOnTheFixture) {
  std::ifstream in(kFixtures + "/loss_parity.json");
  ASSERT_TRUE(in) << kFixtures << "/loss_parity.json";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture.at("cases").size(), 7u);
  auto tensor = [](const nlohmann::json& values, const nlohmann::json& shape) {
    std::vector<float> v = values.get<std::vector<float>>();
    return at::tensor(v).reshape(shape.get<std::vector<int64_t>>());
  };
  for (const nlohmann::json& c : fixture.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const nlohmann::json& o = c.at("options");
    LossOptions loss;
    loss.kind = o.at("kind") == "dice" ? LossKind::kDice : LossKind::kDiceCE;
    loss.lambda_dice = o.value("lambda_dice", 1.0);
    loss.lambda_ce = o.value("lambda_ce", 1.0);
    loss.include_background = o.value("include_background", true);
    loss.squared_pred = o.value("squared_pred", false);
    loss.smooth_nr = o.value("smooth_nr", 1e-5);
    loss.smooth_dr = o.value("smooth_dr", 1e-5);
    const bool softmax = o.value("softmax", false);
    ASSERT_EQ(softmax, o.value("to_onehot_y", false));  // the trainer's pairing
    const at::Tensor logits = tensor(c.at("logits"), c.at("logits_shape")).set_requires_grad(true);
    const at::Tensor target = tensor(c.at("target"), c.at("target_shape"));
    const at::Tensor value = segmentation_loss(logits, target, loss, softmax);
    value.backward();
    EXPECT_NEAR(value.item<double>(), c.at("loss").get<double>(), 2e-6);
    const at::Tensor expected = at::tensor(c.at("grad").get<std::vector<double>>());
    const at::Tensor got = logits.grad().to(at::kDouble).flatten();
    EXPECT_LE((got - expected).abs().max().item<double>(), 1e-6);
  }
}

// On a GPU under deterministic algorithms (the trainer's default), DiceCE with
// class indices runs (CUDA refuses nll_loss2d there: the spleen recipe stopped
// on it) and equals the CPU's value and gradient within float tolerance.
TEST(DiceCELossTest, ClassIndicesTrainOnCudaUnderDeterministicAlgorithms) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  DiceCELossOptions o;
  o.dice.softmax = true;
  o.dice.to_onehot_y = true;
  at::manual_seed(3);
  const at::Tensor logits = at::randn({2, 3, 4, 5, 6});
  const at::Tensor target = at::randint(0, 3, {2, 1, 4, 5, 6}).to(at::kFloat);
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const at::Tensor cpu = logits.clone().set_requires_grad(true);
  const at::Tensor gpu = logits.to(at::kCUDA).set_requires_grad(true);
  const at::Tensor on_cpu = dice_ce_loss(cpu, target, o);
  const at::Tensor on_gpu = dice_ce_loss(gpu, target.to(at::kCUDA), o);
  on_cpu.backward();
  on_gpu.backward();
  at::globalContext().setDeterministicAlgorithms(was, false);
  EXPECT_NEAR(on_gpu.item<double>(), on_cpu.item<double>(), 1e-5);
  EXPECT_LE((gpu.grad().cpu() - cpu.grad()).abs().max().item<double>(), 1e-6);
}

// ---- Deep supervision ------------------------------------------------------

// loss_parity.json's "deep_supervision" cases: MONAI's DeepSupervisionLoss
// (weight_mode "exp") around DiceLoss/DiceCELoss over outputs of falling
// sizes, the target down-sampled nearest-exact: the value and every output's
// gradient.
TEST(DeepSupervisionTest, TheLossMatchesMonaisDeepSupervisionLossOnTheFixture) {
  std::ifstream in(kFixtures + "/loss_parity.json");
  ASSERT_TRUE(in) << kFixtures << "/loss_parity.json";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_EQ(fixture.at("deep_supervision").size(), 3u);
  auto tensor = [](const nlohmann::json& values, const nlohmann::json& shape) {
    return at::tensor(values.get<std::vector<float>>()).reshape(shape.get<std::vector<int64_t>>());
  };
  for (const nlohmann::json& c : fixture.at("deep_supervision")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const nlohmann::json& o = c.at("options");
    LossOptions loss;
    loss.kind = o.at("kind") == "dice" ? LossKind::kDice : LossKind::kDiceCE;
    loss.include_background = o.value("include_background", true);
    const bool softmax = o.value("softmax", false);
    std::vector<at::Tensor> outputs;
    for (const nlohmann::json& out : c.at("outputs"))
      outputs.push_back(tensor(out.at("logits"), out.at("shape")).set_requires_grad(true));
    const at::Tensor value =
        training_loss(outputs, tensor(c.at("target"), c.at("target_shape")), loss, softmax);
    value.backward();
    EXPECT_NEAR(value.item<double>(), c.at("loss").get<double>(), 4e-6);
    for (size_t l = 0; l < outputs.size(); ++l) {
      const at::Tensor expected =
          at::tensor(c.at("outputs")[l].at("grad").get<std::vector<double>>());
      EXPECT_LE((outputs[l].grad().to(at::kDouble).flatten() - expected).abs().max().item<double>(),
                1e-6)
          << "output " << l;
    }
  }
}

ModelOptions deeply_supervised(int64_t levels) {
  ModelOptions o;
  o.out_channels = 3;
  o.channels = {4, 8, 16, 32};
  o.strides = {2, 2, 2};
  o.num_res_units = 1;
  o.deep_supervision = levels;
  return o;
}

// The heads follow MONAI's keys, leave its initial weights as they were
// without them, and are not run in inference: the same logits as MONAI's UNet.
TEST(DeepSupervisionTest, TheHeadsFollowMonaisTreeAndLeaveItsWeightsAndOutput) {
  Model plain(deeply_supervised(0), 5), supervised(deeply_supervised(2), 5);
  const NamedTensors a = plain.state_dict(), b = supervised.state_dict();
  ASSERT_EQ(b.size(), a.size() + 4);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].first, a[i].first);
    EXPECT_TRUE(at::equal(b[i].second, a[i].second)) << a[i].first;
  }
  const std::vector<std::pair<std::string, std::vector<int64_t>>> heads{
      {"deep_supervision.0.weight", {3, 4, 1, 1, 1}},
      {"deep_supervision.0.bias", {3}},
      {"deep_supervision.1.weight", {3, 8, 1, 1, 1}},
      {"deep_supervision.1.bias", {3}}};
  for (size_t k = 0; k < heads.size(); ++k) {
    EXPECT_EQ(b[a.size() + k].first, heads[k].first);
    EXPECT_EQ(b[a.size() + k].second.sizes().vec(), heads[k].second);
  }
  const at::Tensor x = at::randn({1, 1, 16, 16, 16});
  plain.train(false);
  supervised.train(false);
  EXPECT_TRUE(at::equal(supervised.forward(x), plain.forward(x)));
  EXPECT_EQ(supervised.training_outputs(x).size(), 1u);  // evaluation: the output alone
}

// In training: the output, then level 1 at half and level 2 at a quarter of
// the input's size; the loss reaches every head and the decoder through them.
TEST(DeepSupervisionTest, TrainingOutputsAreEachLevelsSizeAndTheLossReachesEveryHead) {
  Model net(deeply_supervised(2), 5);
  net.train(true);
  const at::Tensor x = at::randn({2, 1, 16, 16, 8});
  const std::vector<at::Tensor> outputs = net.training_outputs(x);
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_EQ(outputs[0].sizes().vec(), (std::vector<int64_t>{2, 3, 16, 16, 8}));
  EXPECT_EQ(outputs[1].sizes().vec(), (std::vector<int64_t>{2, 3, 8, 8, 4}));
  EXPECT_EQ(outputs[2].sizes().vec(), (std::vector<int64_t>{2, 3, 4, 4, 2}));
  EXPECT_EQ(net.training_outputs(x).size(), 3u);  // the taps were emptied: no stale levels
  // Only the level-2 output's loss: its head and the layers below it get
  // gradients, the top level's up-sampling does not.
  const at::Tensor target = at::randint(0, 3, {2, 1, 4, 4, 2}).to(at::kFloat);
  LossOptions loss;
  segmentation_loss(outputs[2], target, loss, true).backward();
  for (const auto& [key, p] : net.named_parameters()) {
    const bool reached = p.grad().defined() && p.grad().abs().sum().item<double>() > 0;
    if (key.rfind("deep_supervision.1.", 0) == 0 || key.rfind("model.0.", 0) == 0) {
      EXPECT_TRUE(reached) << key;
    }
    if (key.rfind("deep_supervision.0.", 0) == 0 || key.rfind("model.2.", 0) == 0) {
      EXPECT_FALSE(reached) << key;
    }
  }
}

TEST(DeepSupervisionTest, RefusesMoreLevelsThanTheDecoderHasAndOtherModels) {
  try {
    Model net(deeply_supervised(3));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("deep_supervision=3 must be at most 2"));
  }
  ModelOptions segresnet;
  segresnet.kind = ModelKind::kSegResNet;
  segresnet.deep_supervision = 1;
  try {
    Model net(segresnet);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("deep_supervision=1: only model=unet"));
  }
}

TEST(DiceCELossTest, RefusesNegativeWeightsAndUnreducedLossNamingThem) {
  DiceCELossOptions o;
  o.dice.softmax = true;
  o.dice.to_onehot_y = true;
  o.lambda_ce = -1;
  try {
    dice_ce_loss(at::zeros({1, 2, 2, 2, 2}), at::zeros({1, 1, 2, 2, 2}), o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("lambda_ce=-1"));
  }
  o.lambda_ce = 1;
  o.dice.reduction = Reduction::kNone;
  EXPECT_THROW(dice_ce_loss(at::zeros({1, 2, 2, 2, 2}), at::zeros({1, 1, 2, 2, 2}), o),
               std::invalid_argument);
  o.dice.reduction = Reduction::kMean;
  try {
    dice_ce_loss(at::zeros({1, 2, 2, 2, 2}), at::zeros({1, 3, 2, 2, 2}), o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("[1, 3, 2, 2, 2]"));
  }
}

TEST(DiceScoreTest, CountsThresholdedOverlapAndSkipsEmptyLabels) {
  at::Tensor logits = at::full({1, 1, 2, 2, 2}, -1.0);
  at::Tensor label = at::zeros({1, 1, 2, 2, 2});
  EXPECT_TRUE(std::isnan(dice_score(logits, label)));
  label.view({-1}).narrow(0, 0, 4).fill_(1);   // 4 foreground voxels
  logits.view({-1}).narrow(0, 2, 4).fill_(1);  // predicted 2..5: overlap 2
  EXPECT_DOUBLE_EQ(dice_score(logits, label), 2.0 * 2 / (4 + 4));
}

TEST(ClassDiceTest, SoftmaxScoresClassesWithoutBackgroundAgainstIndexLabels) {
  // 3 classes over 8 voxels; labels 0 0 1 1 1 2 2 0, argmax 0 1 1 1 2 2 0 0.
  const at::Tensor label = at::tensor({0., 0., 1., 1., 1., 2., 2., 0.}).reshape({1, 2, 2, 2});
  const at::Tensor argmax = at::tensor({0, 1, 1, 1, 2, 2, 0, 0}, at::kLong);
  const at::Tensor logits = at::one_hot(argmax, 3).to(at::kFloat).t().reshape({1, 3, 2, 2, 2}) * 5;
  const std::vector<double> d = class_dice(logits, label.unsqueeze(0), true);
  ASSERT_EQ(d.size(), 2u);                    // classes 1 and 2
  EXPECT_DOUBLE_EQ(d[0], 2.0 * 2 / (3 + 3));  // class 1: predicted {1,2,3}, true {2,3,4}
  EXPECT_DOUBLE_EQ(d[1], 2.0 * 1 / (2 + 2));  // class 2: predicted {4,5}, true {5,6}
  // A class absent from the label is NaN (MONAI ignore_empty).
  const at::Tensor no_two = label.clamp_max(1);
  EXPECT_TRUE(std::isnan(class_dice(logits, no_two, true)[1]));
  EXPECT_THROW(class_dice(logits, at::zeros({3, 2, 2, 2}), true), std::invalid_argument);
}

TEST(ClassDiceTest, SigmoidScoresEveryChannelOnItsOwn) {
  at::Tensor logits = at::full({3, 2, 2, 2}, -1.0);
  at::Tensor label = at::zeros({3, 2, 2, 2});
  label[0].view({-1}).narrow(0, 0, 4).fill_(1);
  logits[0].view({-1}).narrow(0, 2, 4).fill_(1);  // overlap 2 of 4 and 4
  label[1].fill_(1);
  logits[1].fill_(1);  // perfect
  const std::vector<double> d = class_dice(logits, label, false);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_DOUBLE_EQ(d[0], 0.5);
  EXPECT_DOUBLE_EQ(d[1], 1.0);
  EXPECT_TRUE(std::isnan(d[2]));
  EXPECT_DOUBLE_EQ(dice_score(logits, label), 0.75) << "dice_score is their mean";
}

}  // namespace
}  // namespace volshard
