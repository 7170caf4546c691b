#pragma once
// The optimizer TrainOptions ask for, its learning-rate schedule, and its
// state as bytes (what a checkpoint holds).

#include <ATen/core/Tensor.h>
#include <torch/optim/adam.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volshard/trainer/options.h"

namespace volshard {

/// Adam (lr, weight_decay) or SGD (lr, momentum, weight_decay), as
/// options.optimizer says, over `parameters`; Adam through torch's fused
/// kernel (FusedAdam) when options.fused_optimizer.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& options,
                                                        std::vector<at::Tensor> parameters);

/// Sets every parameter group's learning rate (and a FusedAdam's lr tensor);
/// `kind` is what make_optimizer built.
void set_lr(torch::optim::Optimizer& optimizer, double lr, Optimizer kind);

/// The optimizer's step, skipped where `found_inf` (GradScaler::found_inf(),
/// on the parameters' device) is nonzero. A FusedAdam skips inside its kernel
/// and reads nothing back to the host; any other optimizer reads found_inf
/// (a host sync) and steps unless it is set. An undefined found_inf: a step.
void optimizer_step(torch::optim::Optimizer& optimizer, const at::Tensor& found_inf);

/// torch.nn.utils.clip_grad_norm_(parameters, max_norm) as torch's Python
/// computes it (foreach norms, their norm, the coefficient clamped at 1 and
/// multiplied in): on the gradients' device, nothing read back to the host.
void clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm);

/// torch.optim.Adam(fused=True) for LibTorch, whose Adam has no fused form:
/// every parameter's update in one call of torch's _fused_adam_ kernel (CUDA
/// and CPU), the step counts float32 tensors on the parameters' device as
/// torch keeps them, and a step skipped inside the kernel where a GradScaler
/// found an inf or nan, so a step reads nothing back to the host. Its state is
/// torch::optim::Adam's (the same archive: a run saved with one resumes with
/// the other). With an lr tensor (use_lr_tensor) the kernel reads the rate
/// from the device: a CUDA graph that replays the step takes the scheduled
/// rate set before each replay. Not thread-safe.
class FusedAdam : public torch::optim::Adam {
 public:
  FusedAdam(std::vector<at::Tensor> parameters, torch::optim::AdamOptions options);
  at::Tensor step(LossClosure closure = nullptr) override;
  /// A step, unless `found_inf` (float32 [1], the parameters' device) is
  /// nonzero: then the kernel leaves parameters, moments and counts as they were.
  void step_unless(const at::Tensor& found_inf);
  /// From now on the kernel reads the learning rate from a [1] tensor on the
  /// parameters' device, which set_lr fills: float32 on CUDA (as its kernel
  /// reads it: a step within rounding of the scalar rate's), float64 on the
  /// CPU (the scalar rate's step, bit for bit).
  void use_lr_tensor();
  void set_lr(double lr);
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void run(const std::optional<at::Tensor>& found_inf);
  std::vector<at::Tensor> steps_;  ///< per parameter of the group, in order; made on first use
  at::Tensor lr_;                  ///< use_lr_tensor's
};

/// The learning rate of optimizer step `step` (0-based) of `total_steps`:
/// during options.warmup_steps lr * (step + 1) / warmup_steps, then
/// options.lr_schedule over the steps left (steps past the end keep the last
/// value): constant, cosine to 0, or poly with power 0.9.
double scheduled_lr(const TrainOptions& options, int64_t step, int64_t total_steps);

/// LibTorch's optimizer archive, as bytes.
std::vector<char> optimizer_bytes(torch::optim::Optimizer& optimizer);

/// Loads optimizer_bytes; throws std::runtime_error naming `path` (where the
/// bytes came from) when they do not fit this model and optimizer.
void load_optimizer(torch::optim::Optimizer& optimizer, const std::vector<char>& bytes,
                    const std::string& path);

}  // namespace volshard
