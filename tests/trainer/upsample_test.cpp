// The trilinear up-sampling with a deterministic backward: torch's forward
// values, and the gradient torch's own backward gives, within float rounding.
#include "models/upsample.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <tuple>

namespace volshard::detail {
namespace {

// torch's forward and backward (F.interpolate(scale_factor, trilinear)) and
// ours, at the same input and upstream gradient.
std::tuple<double, double> differences(const at::Tensor& input, std::array<double, 3> scale,
                                       const at::Device& device) {
  namespace F = torch::nn::functional;
  at::Tensor a = input.to(device).requires_grad_(true);
  at::Tensor b = input.to(device).requires_grad_(true);
  const at::Tensor theirs =
      F::interpolate(a, F::InterpolateFuncOptions()
                            .scale_factor(std::vector<double>{scale[0], scale[1], scale[2]})
                            .mode(torch::kTrilinear)
                            .align_corners(false));
  const at::Tensor ours = upsample_trilinear_deterministic(b, scale);
  EXPECT_EQ(theirs.sizes(), ours.sizes());
  at::manual_seed(11);
  const at::Tensor upstream = at::randn(theirs.sizes()).to(device);
  theirs.backward(upstream);
  ours.backward(upstream);
  return {(theirs - ours).abs().max().item<double>(),
          (a.grad() - b.grad()).abs().max().item<double>() / a.grad().abs().max().item<double>()};
}

TEST(UpsampleTest, ForwardEqualsTorchsAndBackwardWithinRoundingOnTheCpu) {
  at::manual_seed(5);
  // SegResNet's factor 2 on odd and even sizes, and factors whose weights are not binary fractions.
  for (const auto& [shape, scale] :
       std::vector<std::pair<std::vector<int64_t>, std::array<double, 3>>>{
           {{2, 3, 5, 6, 7}, {2.0, 2.0, 2.0}},
           {{1, 2, 1, 4, 3}, {2.0, 2.0, 2.0}},
           {{1, 1, 4, 5, 6}, {3.0, 1.5, 2.5}}}) {
    const auto [forward, backward] = differences(at::randn(shape), scale, at::kCPU);
    EXPECT_EQ(forward, 0.0);  // torch's own forward
    EXPECT_LT(backward, 1e-6) << "scale " << scale[0] << "," << scale[1] << "," << scale[2];
  }
}

TEST(UpsampleTest, InterpolationMatrixRowsSumToOneAndClampAtTheEdges) {
  const at::Tensor m = linear_interpolation_matrix(3, 6, 2.0);
  EXPECT_TRUE(at::allclose(m.sum(1), at::ones({6}, at::kDouble)));
  // Output 0 reads source -0.25, clamped to 0; output 1 reads 0.25.
  EXPECT_EQ(m[0][0].item<double>(), 1.0);
  EXPECT_EQ(m[1][0].item<double>(), 0.75);
  EXPECT_EQ(m[1][1].item<double>(), 0.25);
  EXPECT_EQ(m[5][2].item<double>(), 1.0);  // past the last source: the edge value
}

// On a GPU (skipped without one): under deterministic algorithms, where
// torch's own backward is refused, ours runs, twice to the same bits, and
// within rounding of torch's (computed with deterministic algorithms off).
TEST(UpsampleTest, BackwardRunsDeterministicallyOnTheGpu) {
  if (!at::hasCUDA() || at::getNumGPUs() == 0) GTEST_SKIP() << "no CUDA device (no GPU lent)";
  at::manual_seed(5);
  const at::Tensor input = at::randn({2, 8, 12, 10, 9});
  const auto [forward, backward] = differences(input, {2.0, 2.0, 2.0}, at::Device(at::kCUDA, 0));
  EXPECT_LT(forward, 1e-6);
  EXPECT_LT(backward, 1e-5);
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, false);
  auto grad_of = [&] {
    at::Tensor x = input.to(at::Device(at::kCUDA, 0)).requires_grad_(true);
    upsample_trilinear_deterministic(x, {2.0, 2.0, 2.0}).pow(2).sum().backward();
    return x.grad().cpu();
  };
  const at::Tensor first = grad_of(), second = grad_of();
  at::globalContext().setDeterministicAlgorithms(was, false);
  EXPECT_TRUE(at::equal(first, second));
}

}  // namespace
}  // namespace volshard::detail
