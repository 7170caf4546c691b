#include "engine/grad_scaler.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace volshard {

void GradScalerOptions::validate() const {
  if (!(init_scale > 0 && std::isfinite(init_scale)))
    throw std::invalid_argument("GradScaler: init_scale=" + std::to_string(init_scale) +
                                " must be positive and finite");
  if (!(growth_factor > 1 && std::isfinite(growth_factor)))
    throw std::invalid_argument("GradScaler: growth_factor=" + std::to_string(growth_factor) +
                                " must be > 1");
  if (!(backoff_factor > 0 && backoff_factor < 1))
    throw std::invalid_argument("GradScaler: backoff_factor=" + std::to_string(backoff_factor) +
                                " must be in (0, 1)");
  if (growth_interval < 1)
    throw std::invalid_argument("GradScaler: growth_interval=" + std::to_string(growth_interval) +
                                " must be >= 1");
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  options_.validate();
  load_state({options_.init_scale, 0});
}

void GradScaler::to(const at::Device& device) {
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  if (found_inf_.defined()) found_inf_ = found_inf_.to(device);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  return loss * scale_.to(loss.device());
}

void GradScaler::unscale(const std::vector<at::Tensor>& parameters) {
  if (found_inf_.defined()) return;
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty() && grads.front().device() != scale_.device()) to(grads.front().device());
  // As torch: the reciprocal in double, then float32; all on the state's
  // device (no copy from the host: a CUDA graph captures this).
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  found_inf_ = at::zeros({1}, scale_.options());
  if (grads.empty()) return;
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
}

bool GradScaler::step(const std::vector<at::Tensor>& parameters,
                      const std::function<void()>& optimizer_step) {
  unscale(parameters);
  const bool finite = found_inf_.item<float>() == 0.0f;
  if (finite) optimizer_step();
  return finite;
}

void GradScaler::update() {
  if (!found_inf_.defined())
    throw std::logic_error("GradScaler::update without unscale or step in this iteration");
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
  found_inf_ = at::Tensor();
}

double GradScaler::current_scale() const { return scale_.item<double>(); }

GradScalerState GradScaler::state() const {
  return {current_scale(), growth_tracker_.item<int64_t>()};
}

void GradScaler::load_state(const GradScalerState& state) {
  if (!(state.scale > 0 && std::isfinite(state.scale)) || state.growth_tracker < 0)
    throw std::invalid_argument("GradScaler: a state of scale " + std::to_string(state.scale) +
                                " and growth tracker " + std::to_string(state.growth_tracker) +
                                " is not one it reaches");
  const at::Device device = scale_.defined() ? scale_.device() : at::Device(at::kCPU);
  scale_ = at::full({1}, state.scale, at::kFloat).to(device);
  growth_tracker_ = at::full({1}, state.growth_tracker, at::kInt).to(device);
  found_inf_ = at::Tensor();
}

}  // namespace volshard
