#pragma once
// torch.amp.GradScaler for LibTorch, which has none: float16 training
// multiplies the loss by a scale so that small gradients do not flush to
// zero, unscales the gradients before the optimizer step, skips a step whose
// gradients hold an inf or a nan, and grows or backs off the scale with
// torch's own kernels (_amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_), so the sequence of scales and skipped steps equals
// torch's (tests/trainer/fixtures/grad_scaler.json).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace volshard {

struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16, torch's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  ///< finite steps in a row before the scale grows
  /// Throws std::invalid_argument naming the field.
  void validate() const;
};

/// What a checkpoint keeps, so a resumed run continues with the same scale.
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// Moves the state to `device` (the gradients' device), where unscale and
  /// update run. unscale moves it there itself otherwise.
  void to(const at::Device& device);
  /// loss x scale (float32), whose backward gives scaled gradients.
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides the gradients of `parameters` by the scale in place, once per
  /// step (as torch's unscale_, before clipping), and notes whether any is
  /// inf or nan (found_inf(), on their device). Parameters without a gradient
  /// are skipped.
  void unscale(const std::vector<at::Tensor>& parameters);
  /// After unscale, until update: float32 [1] on the gradients' device, 1
  /// where a gradient held an inf or a nan (the step must be skipped).
  const at::Tensor& found_inf() const { return found_inf_; }
  /// The scale, float32 [1] on the state's device (no read to the host).
  const at::Tensor& scale_tensor() const { return scale_; }
  /// Unscales (unless done), then runs `optimizer_step` unless a gradient was
  /// inf or nan (a read of the flag to the host). Returns whether it ran. Call
  /// update() after it.
  bool step(const std::vector<at::Tensor>& parameters, const std::function<void()>& optimizer_step);
  /// Backs the scale off after a skipped step, grows it after growth_interval
  /// finite ones (torch's _amp_update_scale_).
  void update();

  double current_scale() const;
  GradScalerState state() const;
  void load_state(const GradScalerState& state);

 private:
  GradScalerOptions options_;
  at::Tensor scale_;           ///< float32 [1]
  at::Tensor growth_tracker_;  ///< int32 [1]
  at::Tensor found_inf_;       ///< float32 [1]; defined once unscaled this step
};

}  // namespace volshard
