// GraphedStep: a step's body on static buffers (captured and replayed on a
// GPU), other shapes on themselves.
#include "engine/graph_step.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace volshard {
namespace {

TEST(GraphedStepTest, RunsTheBodyOnStaticBuffersAndOtherShapesOnThemselves) {
  GraphedStep step(/*capture=*/false);
  std::vector<const void*> seen;
  const GraphedStep::Body body = [&](const at::Tensor& image, const at::Tensor& label) {
    seen.push_back(image.data_ptr());
    StepValues v;
    v.losses.push_back((image.sum() + label.sum()).reshape({}));
    return v;
  };
  const at::Tensor a = at::full({2, 1, 4, 4, 4}, 1.0f), b = at::full({2, 1, 4, 4, 4}, 2.0f);
  const at::Tensor short_batch = at::full({1, 1, 4, 4, 4}, 3.0f);
  const at::Tensor label = at::zeros({2, 1, 4, 4, 4}), short_label = at::zeros({1, 1, 4, 4, 4});
  EXPECT_EQ(step.run(a, label, body).losses[0].item<float>(), 128.0f);
  EXPECT_EQ(step.run(b, label, body).losses[0].item<float>(), 256.0f);
  EXPECT_EQ(step.run(short_batch, short_label, body).losses[0].item<float>(), 192.0f);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], seen[1]);  // the same static buffer, the batch copied in
  EXPECT_NE(seen[0], a.data_ptr());
  EXPECT_EQ(seen[2], short_batch.data_ptr());  // another shape: itself, uncaptured
  EXPECT_EQ(step.static_steps(), 2);
  EXPECT_EQ(step.other_shape_steps(), 1);
  EXPECT_FALSE(step.replaying());
}

// On a GPU (skipped without one): a small network's training step (forward,
// backward, SGD) captured after warm-up and replayed gives the weights that
// running it uncaptured gives, batch after batch.
TEST(GraphedStepTest, CapturedStepTrainsAsTheUncapturedStepOnTheGpu) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  const at::Device cuda(at::kCUDA, 0);
  auto train = [&](bool capture) {
    torch::manual_seed(0);
    torch::nn::Conv3d conv(torch::nn::Conv3dOptions(1, 2, 3).padding(1));
    conv->to(cuda);
    torch::optim::SGD sgd(conv->parameters(), torch::optim::SGDOptions(0.1));
    GraphedStep step(capture, 2);
    const GraphedStep::Body body = [&](const at::Tensor& image, const at::Tensor& label) {
      sgd.zero_grad(false);
      const at::Tensor loss = (conv->forward(image) - label).pow(2).mean();
      loss.backward();
      sgd.step();
      StepValues v;
      v.losses.push_back(loss.detach());
      return v;
    };
    std::vector<float> losses;
    for (int k = 0; k < 6; ++k) {
      at::manual_seed(k);
      const at::Tensor image = at::randn({2, 1, 8, 8, 8}).to(cuda);
      const at::Tensor label = at::randn({2, 2, 8, 8, 8}).to(cuda);
      losses.push_back(step.run(image, label, body).losses[0].item<float>());
    }
    EXPECT_EQ(step.replaying(), capture);
    return std::make_pair(losses, conv->weight.detach().cpu());
  };
  const auto [eager_losses, eager] = train(false);
  const auto [graph_losses, graphed] = train(true);
  for (size_t k = 0; k < eager_losses.size(); ++k)
    EXPECT_NEAR(graph_losses[k], eager_losses[k], 1e-5) << "step " << k;
  EXPECT_LT((graphed - eager).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace volshard
