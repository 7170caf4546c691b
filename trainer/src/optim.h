#pragma once
// The optimizer TrainOptions ask for, its learning-rate schedule, and its
// state as bytes (what a checkpoint holds).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "volshard/trainer/options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace volshard {

/// Adam (lr, weight_decay) or SGD (lr, momentum, weight_decay), as
/// options.optimizer says, over `parameters`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& options,
                                                        std::vector<at::Tensor> parameters);

/// Sets every parameter group's learning rate; `kind` is what make_optimizer built.
void set_lr(torch::optim::Optimizer& optimizer, double lr, Optimizer kind);

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
