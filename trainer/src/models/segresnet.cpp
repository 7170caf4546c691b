// MONAI's SegResNet (monai.networks.nets.SegResNet, spatial_dims 3,
// upsample_mode nontrainable, use_conv_final, no VAE): the registry's
// "segresnet" entry, the network of MONAI's BraTS tutorial. Module names
// follow MONAI's, so state_dict keys equal its.
#include <torch/torch.h>  // torch::nn (layers.h); precompiled with the others

#include <stdexcept>
#include <string>

#include "models/layers.h"
#include "models/upsample.h"
#include "volshard/core/error.h"
#include "volshard/core/limits.h"

namespace volshard::detail {
namespace {

void validate_segresnet(const ModelOptions& o) {
  if (o.blocks_down.empty() || o.blocks_down.size() > 8)
    throw std::invalid_argument("SegResNet: blocks_down=" + edges_text(o.blocks_down) +
                                " needs 1 to 8 levels");
  if (o.blocks_up.size() + 1 != o.blocks_down.size())
    throw std::invalid_argument("SegResNet: blocks_up=" + edges_text(o.blocks_up) + " has " +
                                std::to_string(o.blocks_up.size()) +
                                " entries, blocks_down=" + edges_text(o.blocks_down) + " has " +
                                std::to_string(o.blocks_down.size()) +
                                ": blocks_up must have one fewer (the output at the input's size)");
  for (size_t i = 0; i < o.blocks_down.size(); ++i)
    if (o.blocks_down[i] < 0 || o.blocks_down[i] > 64)
      throw std::invalid_argument("SegResNet: blocks_down[" + std::to_string(i) +
                                  "]=" + std::to_string(o.blocks_down[i]) + " must be in [0, 64]");
  for (size_t i = 0; i < o.blocks_up.size(); ++i)
    if (o.blocks_up[i] < 0 || o.blocks_up[i] > 64)
      throw std::invalid_argument("SegResNet: blocks_up[" + std::to_string(i) +
                                  "]=" + std::to_string(o.blocks_up[i]) + " must be in [0, 64]");
  if (o.init_filters < 1 || o.init_filters > 4096)
    throw std::invalid_argument("SegResNet: init_filters=" + std::to_string(o.init_filters) +
                                " must be in [1, 4096]");
  // A lower bound of the weights (two 3^3 convolutions per block at each
  // level's width), float32 with Adam's gradient and two moments.
  double weights = 0;
  for (size_t i = 0; i < o.blocks_down.size(); ++i) {
    const double c = static_cast<double>(o.init_filters << i);
    weights += 2 * 27.0 * c * c * static_cast<double>(o.blocks_down[i]);
  }
  check_fits_in_memory(16.0 * weights, "SegResNet: init_filters=" + std::to_string(o.init_filters) +
                                           " with blocks_down=" + edges_text(o.blocks_down));
  if (o.resolved_norm() == NormKind::kGroup && o.init_filters % o.num_groups != 0)
    throw std::invalid_argument("SegResNet: init_filters=" + std::to_string(o.init_filters) +
                                " is not a multiple of num_groups=" + std::to_string(o.num_groups) +
                                " (group norm)");
}

int64_t segresnet_size_multiple(const ModelOptions& o) {
  return int64_t{1} << (o.blocks_down.size() - 1);
}

// get_conv_layer: Convolution(conv_only, bias=False unless asked), padding
// (kernel - stride + 1) / 2: 3x3x3 keeps the size (stride 1) or halves it.
std::shared_ptr<Seq> conv_layer(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                bool bias) {
  auto m = std::make_shared<Seq>();
  m->add("conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, kernel)
                                       .stride(stride)
                                       .padding((kernel - stride + 1) / 2)
                                       .bias(bias)));
  return m;
}

// MONAI's segresnet_block.ResBlock: norm1, act, conv1, norm2, act, conv2,
// plus the input.
struct ResBlock : Layer {
  ResBlock(int64_t channels, const BuildContext& context) {
    norm1 = context.norm(*this, "norm1", channels);
    norm2 = context.norm(*this, "norm2", channels);
    conv1 = child(*this, "conv1", conv_layer(channels, channels, 3, 1, false));
    conv2 = child(*this, "conv2", conv_layer(channels, channels, 3, 1, false));
  }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor y = conv1(torch::relu(norm1(x)));
    y = conv2(torch::relu(norm2(y)));
    return y + x;
  }
  Forward norm1, norm2, conv1, conv2;
};

// UpSample(mode nontrainable): trilinear, scale factor 2, align_corners
// False, computed from the scale factor as nn.Upsample(scale_factor=2) does.
// Under deterministic algorithms off the CPU, the same forward with a
// backward CUDA runs deterministically (upsample.h); the CPU's own backward is.
struct Upsample : Layer {
  at::Tensor forward(const at::Tensor& x) override {
    if (!x.is_cpu() && at::globalContext().deterministicAlgorithms())
      return upsample_trilinear_deterministic(x, {2.0, 2.0, 2.0});
    namespace F = torch::nn::functional;
    return F::interpolate(x, F::InterpolateFuncOptions()
                                 .scale_factor(std::vector<double>{2.0, 2.0, 2.0})
                                 .mode(torch::kTrilinear)
                                 .align_corners(false));
  }
};

// nn.ModuleList: children "0", "1", ... called by the parent.
struct List : torch::nn::Module {
  std::vector<std::shared_ptr<Seq>> items;
  void add(std::shared_ptr<Seq> item) {
    items.push_back(register_module(std::to_string(items.size()), std::move(item)));
  }
};

struct SegResNet : Layer {
  explicit SegResNet(const BuildContext& context) {
    const ModelOptions& o = context.options;
    const int64_t f = o.init_filters;
    conv_init = child(*this, "convInit", conv_layer(o.in_channels, f, 3, 1, false));
    down_layers = register_module("down_layers", std::make_shared<List>());
    for (size_t i = 0; i < o.blocks_down.size(); ++i) {
      const int64_t c = f << i;
      auto layer = std::make_shared<Seq>();
      if (i > 0) {
        layer->add("0", conv_layer(c / 2, c, 3, 2, false));
      } else {
        layer->add("0", std::make_shared<Identity>());
      }
      for (int64_t b = 0; b < o.blocks_down[i]; ++b)
        layer->add(std::to_string(b + 1), std::make_shared<ResBlock>(c, context));
      down_layers->add(layer);
    }
    up_layers = register_module("up_layers", std::make_shared<List>());
    up_samples = register_module("up_samples", std::make_shared<List>());
    const size_t n_up = o.blocks_up.size();
    for (size_t i = 0; i < n_up; ++i) {
      const int64_t c = f << (n_up - i);
      auto layer = std::make_shared<Seq>();
      for (int64_t b = 0; b < o.blocks_up[i]; ++b)
        layer->add(std::to_string(b), std::make_shared<ResBlock>(c / 2, context));
      up_layers->add(layer);
      auto sample = std::make_shared<Seq>();
      sample->add("0", conv_layer(c, c / 2, 1, 1, false));
      sample->add("1", std::make_shared<Upsample>());
      up_samples->add(sample);
    }
    auto final_conv = std::make_shared<Seq>();
    final_conv->add_step(context.norm(*final_conv, "0", f));
    final_conv->add_step([](const at::Tensor& x) { return torch::relu(x); });  // act_mod, "1"
    final_conv->add("2", conv_layer(f, o.out_channels, 1, 1, true));
    conv_final = child(*this, "conv_final", final_conv);
    if (o.dropout > 0) {
      // dropout_prob: Dropout3d on convInit's output, in encode().
      dropout = context.dropout(*this, "dropout", true);
    }
  }

  at::Tensor forward(const at::Tensor& input) override {
    at::Tensor x = conv_init(input);
    if (dropout) x = dropout(x);
    std::vector<at::Tensor> down_x;
    for (auto& down : down_layers->items) {
      x = down->forward(x);
      down_x.push_back(x);
    }
    // decode: up_samples[i](x) + the level below it, then up_layers[i].
    for (size_t i = 0; i < up_samples->items.size(); ++i) {
      x = up_samples->items[i]->forward(x) + down_x[down_x.size() - 2 - i];
      x = up_layers->items[i]->forward(x);
    }
    return conv_final(x);
  }

  Forward conv_init, conv_final, dropout;
  std::shared_ptr<List> down_layers, up_layers, up_samples;
};

LayerPtr build_segresnet(const BuildContext& context) {
  return std::make_shared<SegResNet>(context);
}

int64_t segresnet_top_channels(const ModelOptions& o) { return o.init_filters; }

}  // namespace

const Architecture kSegResNetArchitecture{
    ModelKind::kSegResNet,   "segresnet",         "SegResNet",
    NormKind::kGroup,        &validate_segresnet, &segresnet_size_multiple,
    &segresnet_top_channels, &build_segresnet,    nullptr};

}  // namespace volshard::detail
