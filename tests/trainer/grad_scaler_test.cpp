// GradScaler against torch.amp.GradScaler: the golden's sequence of scales,
// growth trackers and skipped steps, and SGD's parameters after each step,
// bit for bit (fixtures/grad_scaler.json, make_grad_scaler.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/grad_scaler.h"

namespace volshard {
namespace {

const std::string kFixtures = VOLSHARD_TRAINER_FIXTURES;

at::Tensor floats(const nlohmann::json& values) {
  std::vector<float> v;
  for (const auto& x : values) v.push_back(std::strtof(x.get<std::string>().c_str(), nullptr));
  return torch::tensor(v, torch::kFloat);
}

TEST(GradScalerTest, SkipsBacksOffAndGrowsAsTorchsGradScaler) {
  std::ifstream in(kFixtures + "/grad_scaler.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto& o = golden["options"];
  GradScalerOptions options;
  options.init_scale = o["init_scale"];
  options.growth_factor = o["growth_factor"];
  options.backoff_factor = o["backoff_factor"];
  options.growth_interval = o["growth_interval"];
  GradScaler scaler(options);
  at::Tensor p = floats(golden["initial"]).requires_grad_(true);
  torch::optim::SGD sgd({p},
                        torch::optim::SGDOptions(o["lr"].get<double>()).momentum(o["momentum"]));
  int skipped = 0;
  for (size_t k = 0; k < golden["steps"].size(); ++k) {
    const auto& step = golden["steps"][k];
    EXPECT_EQ(scaler.current_scale(), step["scale_used"].get<double>()) << "step " << k;
    sgd.zero_grad();
    scaler.scale((p * floats(step["gradient"])).sum()).backward();
    const bool stepped = scaler.step({p}, [&] { sgd.step(); });
    scaler.update();
    skipped += stepped ? 0 : 1;
    EXPECT_EQ(stepped, step["stepped"].get<bool>()) << "step " << k;
    EXPECT_EQ(scaler.current_scale(), step["scale"].get<double>()) << "step " << k;
    EXPECT_EQ(scaler.state().growth_tracker, step["growth_tracker"].get<int64_t>()) << "step " << k;
    EXPECT_TRUE(at::equal(p.detach(), floats(step["param"]))) << "step " << k;
  }
  EXPECT_EQ(skipped, 3);  // the inf, the overflow and the nan
}

TEST(GradScalerTest, StateRoundTripsAndBadStatesOrOptionsAreRefused) {
  GradScaler a;
  a.load_state({1024.0, 7});
  GradScaler b;
  b.load_state(a.state());
  EXPECT_EQ(b.current_scale(), 1024.0);
  EXPECT_EQ(b.state().growth_tracker, 7);
  EXPECT_THROW(b.load_state({0.0, 0}), std::invalid_argument);
  GradScalerOptions bad;
  bad.backoff_factor = 1.5;
  try {
    GradScaler c(bad);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("backoff_factor=1.5"));
  }
  EXPECT_THROW(a.update(), std::logic_error);  // no unscale or step this iteration
}

}  // namespace
}  // namespace volshard
