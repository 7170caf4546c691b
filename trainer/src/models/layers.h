#pragma once
// The building blocks the architectures share (private to trainer/src):
// a one-tensor module, a Sequential with MONAI's child names, the norms
// MONAI's factories make (SyncBatchNorm over ranks for batch), and the
// registry entry each architecture fills in (model.cpp holds the registry).

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "volshard/trainer/model.h"

namespace volshard::detail {

using Forward = std::function<at::Tensor(const at::Tensor&)>;

// A module whose forward maps one tensor to one tensor: lets a tree be built
// from named children exactly as MONAI names them.
struct Layer : torch::nn::Module {
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};
using LayerPtr = std::shared_ptr<Layer>;

/// Registers `module` as `parent`'s child `name` and returns its forward.
template <typename M>
Forward child(torch::nn::Module& parent, const std::string& name, M module) {
  auto registered = parent.register_module(name, module);
  return [registered](const at::Tensor& x) { return registered->forward(x); };
}

// nn.Sequential with chosen child names ("0", "conv", "unit0", ...).
struct Seq : Layer {
  template <typename M>
  void add(const std::string& name, M module) {
    steps.push_back(child(*this, name, module));
  }
  /// A step without a module (an activation MONAI shares, with no state).
  void add_step(Forward step) { steps.push_back(std::move(step)); }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor y = x;
    for (auto& step : steps) y = step(y);
    return y;
  }
  std::vector<Forward> steps;
};

struct Identity : Layer {
  at::Tensor forward(const at::Tensor& x) override { return x; }
};

// BatchNorm3d whose training statistics cover the whole global batch
// (torch.nn.SyncBatchNorm) when a communicator with more than one rank is set;
// otherwise exactly BatchNorm3d. Same parameter and buffer names as
// nn.BatchNorm3d, so state_dict keys equal MONAI's.
struct SyncBatchNorm : Layer {
  explicit SyncBatchNorm(int64_t channels);
  at::Tensor forward(const at::Tensor& x) override;
  static constexpr double kMomentum = 0.1;
  static constexpr double kEps = 1e-5;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  Communicator* comm = nullptr;
};

// nn.Dropout (channel_wise: nn.Dropout3d, whole channels) in training,
// drawing its masks from the model's own generator (Model::seed_dropout), not
// torch's global one: a run's masks then depend on its seed alone, whatever
// other threads or ranks in the process draw. No parameters, as torch's.
struct SeededDropout : Layer {
  SeededDropout(double probability, bool whole_channels, at::Generator* masks)
      : p(probability), channel_wise(whole_channels), generator(masks) {}
  at::Tensor forward(const at::Tensor& x) override;
  double p;
  bool channel_wise;
  at::Generator* generator;
};

/// The decoder's outputs a forward records for deep supervision, by level
/// (1: the block below the top), while `on`.
struct DecoderTaps {
  bool on = false;
  std::vector<std::pair<int64_t, at::Tensor>> outputs;
};

/// What a builder needs besides the options: the norm and dropout factories.
/// Model keeps the batch norms (to hand them a communicator), the dropout
/// generator and the taps.
struct BuildContext {
  const ModelOptions& options;
  std::vector<std::shared_ptr<SyncBatchNorm>>* batch_norms;
  at::Generator* dropout_generator;
  DecoderTaps* taps;
  /// MONAI's get_norm_layer(options.resolved_norm(), spatial_dims=3,
  /// channels) registered as `parent`'s child `name` (eps 1e-5).
  Forward norm(torch::nn::Module& parent, const std::string& name, int64_t channels) const;
  /// Dropout of options.dropout (channel_wise: Dropout3d) as `parent`'s child.
  Forward dropout(torch::nn::Module& parent, const std::string& name, bool channel_wise) const;
};

/// One architecture of the registry.
struct Architecture {
  ModelKind kind;
  const char* key;   ///< "unet": the flag's and the JSON's value
  const char* name;  ///< "UNet": messages
  NormKind default_norm;
  /// Throws std::invalid_argument naming the field (the shared fields are
  /// checked before).
  void (*validate)(const ModelOptions&);
  /// Spatial sizes must be multiples of this.
  int64_t (*size_multiple)(const ModelOptions&);
  /// Feature channels at full resolution (memory estimates).
  int64_t (*top_channels)(const ModelOptions&);
  /// The network's root module, whose children are MONAI's (UNet's one
  /// child "model", SegResNet's "convInit", "down_layers", ...).
  LayerPtr (*build)(const BuildContext&);
  /// Feature channels of decoder level l's output (deep supervision's heads);
  /// nullptr where the architecture has none.
  int64_t (*decoder_channels)(const ModelOptions&, int64_t level);
};

extern const Architecture kUNetArchitecture;
extern const Architecture kSegResNetArchitecture;

}  // namespace volshard::detail
