#include "engine/optim.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "io/archive_io.h"
#include "parallel/first_line.h"

namespace volshard {

FusedAdam::FusedAdam(std::vector<at::Tensor> parameters, torch::optim::AdamOptions options)
    : torch::optim::Adam(std::move(parameters), std::move(options)) {
  if (param_groups().size() != 1) throw std::logic_error("FusedAdam: one parameter group expected");
}

at::Tensor FusedAdam::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode grad(true);
    loss = closure();
  }
  run(std::nullopt);
  return loss;
}

void FusedAdam::step_unless(const at::Tensor& found_inf) {
  run(found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt);
}

void FusedAdam::use_lr_tensor() {
  const auto& params = param_groups().front().params();
  const at::Device device = params.empty() ? at::Device(at::kCPU) : params.front().device();
  // CUDA's kernel reads a float32 rate; the CPU's reads the tensor's value as
  // a double, which float64 keeps exact (the step then equals the scalar one).
  lr_ = at::full(
      {1}, static_cast<torch::optim::AdamOptions&>(param_groups().front().options()).lr(),
      at::TensorOptions().dtype(device.is_cpu() ? at::kDouble : at::kFloat).device(device));
}

void FusedAdam::set_lr(double lr) {
  static_cast<torch::optim::AdamOptions&>(param_groups().front().options()).lr(lr);
  if (lr_.defined()) lr_.fill_(lr);
}

// As torch.optim.Adam(fused=True).step: the moments made on first use
// (zeros in the parameter's layout, as torch::optim::Adam makes them), the
// counts raised, the kernel, and where a scaler found an inf the counts
// lowered again (the kernel leaves everything else as it was).
void FusedAdam::run(const std::optional<at::Tensor>& found_inf) {
  at::NoGradGuard no_grad;
  auto& group = param_groups().front();
  const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
  auto& states = state();
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
  const auto& all = group.params();
  if (steps_.size() != all.size()) steps_.assign(all.size(), at::Tensor());
  for (size_t i = 0; i < all.size(); ++i) {
    const at::Tensor& p = all[i];
    if (!p.grad().defined()) continue;
    auto found = states.find(p.unsafeGetTensorImpl());
    if (found == states.end()) {
      auto s = std::make_unique<torch::optim::AdamParamState>();
      s->step(0);
      s->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      s->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      if (o.amsgrad()) s->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      found = states.emplace(p.unsafeGetTensorImpl(), std::move(s)).first;
    }
    auto& s = static_cast<torch::optim::AdamParamState&>(*found->second);
    // The kernel walks a parameter, its gradient and its moments element by
    // element in memory: each takes the parameter's layout (moments loaded
    // from an archive, a gradient not made by autograd).
    auto same_layout = [&p](const at::Tensor& t) {
      return t.device() == p.device() && t.strides() == p.strides() ? t
                                                                    : at::empty_like(p).copy_(t);
    };
    s.exp_avg(same_layout(s.exp_avg()));
    s.exp_avg_sq(same_layout(s.exp_avg_sq()));
    if (o.amsgrad()) s.max_exp_avg_sq(same_layout(s.max_exp_avg_sq()));
    if (!steps_[i].defined())
      steps_[i] = at::full({}, static_cast<double>(s.step()),
                           at::TensorOptions().dtype(at::kFloat).device(p.device()));
    params.push_back(p);
    grads.push_back(same_layout(p.grad()));  // autograd's gradients have it already
    exp_avgs.push_back(s.exp_avg());
    exp_avg_sqs.push_back(s.exp_avg_sq());
    if (o.amsgrad()) max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
    steps.push_back(steps_[i]);
  }
  if (params.empty()) return;
  at::_foreach_add_(steps, 1);
  const auto [beta1, beta2] = o.betas();
  if (lr_.defined()) {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr_, beta1,
                     beta2, o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false,
                     std::nullopt, found_inf);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, o.lr(), beta1,
                     beta2, o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false,
                     std::nullopt, found_inf);
  }
  // torch's _foreach_sub_(steps, [found_inf] * n), the flag 0-d like the counts.
  if (found_inf)
    at::_foreach_sub_(
        steps, std::vector<at::Tensor>(steps.size(), found_inf->reshape(std::vector<int64_t>{})));
}

void FusedAdam::save(torch::serialize::OutputArchive& archive) const {
  // The counts live on the device; the archive holds torch::optim::Adam's
  // integer steps (a read back to the host, at checkpoints only).
  const auto& all = param_groups().front().params();
  for (size_t i = 0; i < all.size() && i < steps_.size(); ++i) {
    if (!steps_[i].defined()) continue;
    const auto found = state().find(all[i].unsafeGetTensorImpl());
    if (found == state().end()) continue;
    static_cast<torch::optim::AdamParamState&>(*found->second)
        .step(static_cast<int64_t>(steps_[i].item<float>()));
  }
  torch::optim::Adam::save(archive);
}

void FusedAdam::load(torch::serialize::InputArchive& archive) {
  torch::optim::Adam::load(archive);
  steps_.clear();  // remade from the loaded counts on the next step
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        std::vector<at::Tensor> parameters) {
  const auto adam = torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay);
  if (o.optimizer == Optimizer::kAdam && o.fused_optimizer)
    return std::make_unique<FusedAdam>(std::move(parameters), adam);
  if (o.optimizer == Optimizer::kAdam)
    return std::make_unique<torch::optim::Adam>(std::move(parameters), adam);
  return std::make_unique<torch::optim::SGD>(
      std::move(parameters),
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
}

void set_lr(torch::optim::Optimizer& opt, double lr, Optimizer kind) {
  if (auto* fused = dynamic_cast<FusedAdam*>(&opt)) return fused->set_lr(lr);
  for (auto& group : opt.param_groups()) {
    if (kind == Optimizer::kAdam)
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    else
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
}

void optimizer_step(torch::optim::Optimizer& opt, const at::Tensor& found_inf) {
  if (auto* fused = dynamic_cast<FusedAdam*>(&opt)) return fused->step_unless(found_inf);
  if (found_inf.defined() && found_inf.item<float>() != 0.0f) return;  // torch's GradScaler.step
  opt.step();
}

void clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  const at::Tensor total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
  const at::Tensor coefficient = at::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  at::_foreach_mul_(grads, coefficient);
}

double scheduled_lr(const TrainOptions& o, int64_t step, int64_t total_steps) {
  const int64_t warm = o.warmup_steps;
  if (step < warm) return o.lr * static_cast<double>(step + 1) / static_cast<double>(warm);
  step -= warm;
  total_steps -= warm;
  if (o.lr_schedule == LrSchedule::kConstant || total_steps <= 0) return o.lr;
  const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(total_steps));
  if (o.lr_schedule == LrSchedule::kCosine) return o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
  return o.lr * std::pow(1.0 - t, 0.9);  // poly
}

std::vector<char> optimizer_bytes(torch::optim::Optimizer& opt) {
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string s = out.str();
  return {s.begin(), s.end()};
}

void load_optimizer(torch::optim::Optimizer& opt, const std::vector<char>& bytes,
                    const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    std::istringstream in(std::string(bytes.begin(), bytes.end()));
    archive.load_from(in);
    opt.load(archive);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": optimizer state does not fit this model/optimizer (" +
                             detail::first_line(e) + ")");
  }
}

}  // namespace volshard
