#include "optim.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "archive_io.h"

namespace volshard {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        std::vector<at::Tensor> parameters) {
  if (o.optimizer == Optimizer::kAdam)
    return std::make_unique<torch::optim::Adam>(
        std::move(parameters), torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::SGD>(
      std::move(parameters),
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
}

void set_lr(torch::optim::Optimizer& opt, double lr, Optimizer kind) {
  for (auto& group : opt.param_groups()) {
    if (kind == Optimizer::kAdam)
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    else
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
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
