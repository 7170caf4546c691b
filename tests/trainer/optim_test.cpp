// FusedAdam (torch's _fused_adam_ behind LibTorch's Adam state) and the
// clipping that reads nothing back to the host, against LibTorch's own Adam
// and clip_grad_norm_.
#include "engine/optim.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <vector>

namespace volshard {
namespace {

// Two parameters (one 5-d, as a convolution's weight) and the gradients of
// `steps` steps, from a fixed seed.
struct Problem {
  std::vector<at::Tensor> initial;
  std::vector<std::vector<at::Tensor>> grads;  // [step][param]
  explicit Problem(int64_t steps) {
    at::manual_seed(3);
    initial = {at::randn({4, 3, 2, 2, 2}), at::randn({5})};
    for (int64_t s = 0; s < steps; ++s)
      grads.push_back({at::randn({4, 3, 2, 2, 2}), at::randn({5})});
  }
  std::vector<at::Tensor> fresh(bool channels_last = false) const {
    std::vector<at::Tensor> p;
    for (const at::Tensor& t : initial) {
      at::Tensor c = t.clone();
      if (channels_last && c.dim() == 5) c = c.contiguous(at::MemoryFormat::ChannelsLast3d);
      p.push_back(c.requires_grad_(true));
    }
    return p;
  }
  static void set_grads(std::vector<at::Tensor>& params, const std::vector<at::Tensor>& g) {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = g[i].clone();
  }
};

double max_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double most = 0;
  for (size_t i = 0; i < a.size(); ++i)
    most = std::max(most, (a[i] - b[i]).abs().max().item<double>());
  return most;
}

torch::optim::AdamOptions adam_options() {
  return torch::optim::AdamOptions(0.01).weight_decay(0.05);
}

TEST(FusedAdamTest, StepsAsLibTorchsAdamWithinFloatRounding) {
  const Problem problem(12);
  std::vector<at::Tensor> plain = problem.fresh(), fused = problem.fresh();
  torch::optim::Adam a(plain, adam_options());
  FusedAdam b(fused, adam_options());
  for (const auto& g : problem.grads) {
    Problem::set_grads(plain, g);
    Problem::set_grads(fused, g);
    a.step();
    b.step();
  }
  EXPECT_LT(max_difference(plain, fused), 1e-5);
  // The bias corrections count steps: a count off by one moves the first
  // steps by far more than rounding.
  EXPECT_GT(max_difference(plain, problem.fresh()), 1e-2);
}

TEST(FusedAdamTest, LeavesEverythingAsItWasWhereTheScalerFoundAnInf) {
  const Problem problem(3);
  std::vector<at::Tensor> reference = problem.fresh(), skipping = problem.fresh();
  torch::optim::Adam a(reference, adam_options());
  FusedAdam b(skipping, adam_options());
  const at::Tensor inf = at::ones({1}), finite = at::zeros({1});
  Problem::set_grads(reference, problem.grads[0]);
  Problem::set_grads(skipping, problem.grads[0]);
  a.step();
  b.step_unless(finite);
  // A skipped step (and a skipped first step of a parameter's state) moves nothing.
  Problem::set_grads(skipping, problem.grads[1]);
  const std::vector<at::Tensor> before = {skipping[0].detach().clone(),
                                          skipping[1].detach().clone()};
  b.step_unless(inf);
  EXPECT_EQ(max_difference(before, skipping), 0.0);
  for (size_t k = 1; k < 3; ++k) {
    Problem::set_grads(reference, problem.grads[k]);
    Problem::set_grads(skipping, problem.grads[k]);
    a.step();
    b.step_unless(finite);
  }
  EXPECT_LT(max_difference(reference, skipping), 1e-5);
  // Saved, the counts are LibTorch's: 3 steps taken, not 4.
  torch::serialize::OutputArchive out;
  b.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::vector<at::Tensor> loaded_params = problem.fresh();
  torch::optim::Adam loaded(loaded_params, adam_options());
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  loaded.load(in);
  for (const auto& [key, state] : loaded.state())
    EXPECT_EQ(static_cast<const torch::optim::AdamParamState&>(*state).step(), 3);
}

// A checkpoint written by LibTorch's Adam resumes in FusedAdam (and the
// other way): the same archive, the same counts.
TEST(FusedAdamTest, ResumesFromLibTorchsAdamArchive) {
  const Problem problem(6);
  std::vector<at::Tensor> plain = problem.fresh();
  torch::optim::Adam a(plain, adam_options());
  for (size_t k = 0; k < 3; ++k) {
    Problem::set_grads(plain, problem.grads[k]);
    a.step();
  }
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  std::vector<at::Tensor> resumed = {plain[0].detach().clone().requires_grad_(true),
                                     plain[1].detach().clone().requires_grad_(true)};
  FusedAdam b(resumed, adam_options());
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  b.load(in);
  for (size_t k = 3; k < 6; ++k) {
    Problem::set_grads(plain, problem.grads[k]);
    Problem::set_grads(resumed, problem.grads[k]);
    a.step();
    b.step();
  }
  EXPECT_LT(max_difference(plain, resumed), 1e-5);
}

// Channels-last weights (and moments restored in the standard layout, as an
// archive gives them) update element for element as standard ones.
TEST(FusedAdamTest, ChannelsLastWeightsStepAsStandardOnes) {
  const Problem problem(4);
  std::vector<at::Tensor> standard = problem.fresh(), last = problem.fresh(true);
  ASSERT_TRUE(last[0].is_contiguous(at::MemoryFormat::ChannelsLast3d));
  FusedAdam a(standard, adam_options()), b(last, adam_options());
  for (const auto& g : problem.grads) {
    Problem::set_grads(standard, g);
    Problem::set_grads(last, g);
    a.step();
    b.step();
  }
  EXPECT_EQ(max_difference(standard, last), 0.0);
}

// The rate from a tensor on the parameters' device (what a replayed CUDA
// graph reads) steps as the rate given as a number, set before each step.
TEST(FusedAdamTest, ReadsTheRateFromItsTensorAsSetBeforeEachStep) {
  const Problem problem(4);
  std::vector<at::Tensor> scalar = problem.fresh(), tensor = problem.fresh();
  FusedAdam a(scalar, adam_options()), b(tensor, adam_options());
  b.use_lr_tensor();
  for (size_t k = 0; k < problem.grads.size(); ++k) {
    const double lr = 0.01 / static_cast<double>(k + 1);
    a.set_lr(lr);
    b.set_lr(lr);
    Problem::set_grads(scalar, problem.grads[k]);
    Problem::set_grads(tensor, problem.grads[k]);
    a.step();
    b.step();
  }
  EXPECT_EQ(max_difference(scalar, tensor), 0.0);  // float64 on the CPU: the scalar's steps
}

TEST(ClipGradNormTest, ScalesAsLibTorchsClipAndNeverUp) {
  const Problem problem(1);
  for (const double max_norm : {0.5, 1e6}) {
    std::vector<at::Tensor> a = problem.fresh(), b = problem.fresh();
    Problem::set_grads(a, problem.grads[0]);
    Problem::set_grads(b, problem.grads[0]);
    torch::nn::utils::clip_grad_norm_(a, max_norm);
    clip_grad_norm(b, max_norm);
    std::vector<at::Tensor> ga = {a[0].grad(), a[1].grad()}, gb = {b[0].grad(), b[1].grad()};
    EXPECT_LT(max_difference(ga, gb), 1e-6) << "max_norm " << max_norm;
  }
  std::vector<at::Tensor> c = problem.fresh();
  Problem::set_grads(c, problem.grads[0]);
  clip_grad_norm(c, 1e6);  // far under: the gradients as they were
  EXPECT_TRUE(at::equal(c[1].grad(), problem.grads[0][1]));
}

}  // namespace
}  // namespace volshard
