// MONAI's UNet (monai.networks.nets.UNet, spatial_dims 3): the registry's
// "unet" entry. Module names follow MONAI's, so state_dict keys equal its.
#include <torch/torch.h>  // torch::nn (layers.h); precompiled with the others

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/layers.h"
#include "volshard/core/error.h"
#include "volshard/core/limits.h"

namespace volshard::detail {
namespace {

void validate_unet(const ModelOptions& o) {
  if (o.channels.size() < 2)
    throw std::invalid_argument("UNet: channels needs at least 2 entries, got " +
                                std::to_string(o.channels.size()));
  if (o.strides.size() + 1 != o.channels.size())
    throw std::invalid_argument("UNet: strides has " + std::to_string(o.strides.size()) +
                                " entries, channels " + std::to_string(o.channels.size()) +
                                ": strides must have one fewer");
  for (size_t i = 0; i < o.channels.size(); ++i)
    if (o.channels[i] < 1 || o.channels[i] > 65536)
      throw std::invalid_argument("UNet: channels[" + std::to_string(i) +
                                  "]=" + std::to_string(o.channels[i]) + " must be in [1, 65536]");
  // A lower bound of the weights: one 3^3 convolution between consecutive
  // levels, down and up, in float32, with Adam's gradient and two moments.
  double weights = 27.0 * static_cast<double>(o.in_channels) * static_cast<double>(o.channels[0]);
  for (size_t i = 0; i + 1 < o.channels.size(); ++i)
    weights +=
        2 * 27.0 * static_cast<double>(o.channels[i]) * static_cast<double>(o.channels[i + 1]);
  check_fits_in_memory(16.0 * weights, "UNet: channels=" + edges_text(o.channels));
  for (size_t i = 0; i < o.strides.size(); ++i)
    if (o.strides[i] < 1 || o.strides[i] > 8)
      throw std::invalid_argument("UNet: strides[" + std::to_string(i) +
                                  "]=" + std::to_string(o.strides[i]) + " must be in [1, 8]");
  const auto levels = static_cast<int64_t>(o.channels.size()) - 2;
  if (o.deep_supervision > levels)
    throw std::invalid_argument("UNet: deep_supervision=" + std::to_string(o.deep_supervision) +
                                " must be at most " + std::to_string(levels) +
                                " (the decoder levels between the output and the bottom of "
                                "channels=" +
                                edges_text(o.channels) + ")");
  if (o.num_res_units < 0)
    throw std::invalid_argument("UNet: num_res_units=" + std::to_string(o.num_res_units) +
                                " must be >= 0");
  if (o.resolved_norm() == NormKind::kGroup)
    for (size_t i = 0; i < o.channels.size(); ++i)
      if (o.channels[i] % o.num_groups != 0)
        throw std::invalid_argument(
            "UNet: channels[" + std::to_string(i) + "]=" + std::to_string(o.channels[i]) +
            " is not a multiple of num_groups=" + std::to_string(o.num_groups) + " (group norm)");
}

int64_t unet_size_multiple(const ModelOptions& o) {
  int64_t m = 1;
  for (int64_t s : o.strides) m *= s;
  return m;
}

struct Builder {
  const ModelOptions& o;
  const BuildContext& context;

  // MONAI's ADN with ordering "NDA": norm, dropout, PReLU.
  std::shared_ptr<Seq> adn(int64_t channels) const {
    auto m = std::make_shared<Seq>();
    m->add_step(context.norm(*m, "N", channels));
    m->add_step(context.dropout(*m, "D", false));
    m->add("A", torch::nn::PReLU(torch::nn::PReLUOptions().num_parameters(1).init(0.25)));
    return m;
  }

  // MONAI's Convolution: conv (+ ADN unless conv_only); kernel 3, padding 1;
  // transposed: output_padding = stride - 1 so sizes multiply by the stride.
  std::shared_ptr<Seq> convolution(int64_t in, int64_t out, int64_t stride, bool transposed,
                                   bool conv_only) const {
    auto m = std::make_shared<Seq>();
    if (transposed) {
      m->add("conv", torch::nn::ConvTranspose3d(torch::nn::ConvTranspose3dOptions(in, out, 3)
                                                    .stride(stride)
                                                    .padding(1)
                                                    .output_padding(stride - 1)));
    } else {
      m->add("conv",
             torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, 3).stride(stride).padding(1)));
    }
    if (!conv_only) m->add("adn", adn(out));
    return m;
  }

  // MONAI's ResidualUnit: conv(x) + residual(x), residual a convolution when
  // the stride or channel count changes (1x1x1 when only the channels do).
  struct Residual : Layer {
    at::Tensor forward(const at::Tensor& x) override { return conv->forward(x) + residual(x); }
    std::shared_ptr<Seq> conv;
    Forward residual;
  };
  LayerPtr residual_unit(int64_t in, int64_t out, int64_t stride, int64_t subunits,
                         bool last_conv_only) const {
    auto unit = std::make_shared<Residual>();
    auto conv = std::make_shared<Seq>();
    int64_t channels = in, s = stride;
    subunits = std::max<int64_t>(1, subunits);
    for (int64_t su = 0; su < subunits; ++su) {
      conv->add("unit" + std::to_string(su),
                convolution(channels, out, s, false, last_conv_only && su == subunits - 1));
      channels = out;
      s = 1;
    }
    unit->conv = unit->register_module("conv", conv);
    if (stride != 1 || in != out) {
      const bool only_channels = stride == 1;
      unit->residual =
          child(*unit, "residual",
                torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, only_channels ? 1 : 3)
                                      .stride(stride)
                                      .padding(only_channels ? 0 : 1)));
    } else {
      unit->residual = [](const at::Tensor& x) { return x; };
    }
    return unit;
  }

  LayerPtr down(int64_t in, int64_t out, int64_t stride) const {
    if (o.num_res_units > 0) return residual_unit(in, out, stride, o.num_res_units, false);
    return convolution(in, out, stride, false, false);
  }

  LayerPtr up(int64_t in, int64_t out, int64_t stride, bool is_top) const {
    auto conv = convolution(in, out, stride, true, is_top && o.num_res_units == 0);
    if (o.num_res_units == 0) return conv;
    auto m = std::make_shared<Seq>();
    m->add("0", conv);
    m->add("1", residual_unit(out, out, 1, 1, is_top));
    return m;
  }

  // MONAI's SkipConnection; with deep supervision it records its sub-block's
  // output (decoder level `tapped`) while the taps are on.
  struct Skip : Layer {
    at::Tensor forward(const at::Tensor& x) override {
      at::Tensor sub = submodule->forward(x);
      if (taps != nullptr && taps->on) taps->outputs.emplace_back(tapped, sub);
      return torch::cat({x, sub}, 1);
    }
    LayerPtr submodule;
    DecoderTaps* taps = nullptr;
    int64_t tapped = 0;
  };

  // MONAI's _create_block: Sequential(down, SkipConnection(subblock), up).
  // The sub-block is built before down and up, as MONAI builds it.
  LayerPtr block(int64_t in, int64_t out, size_t level, bool is_top) const {
    const int64_t c = o.channels[level];
    const int64_t s = o.strides[level];
    LayerPtr sub;
    int64_t up_in = 0;
    if (o.channels.size() - level > 2) {
      sub = block(c, c, level + 1, false);
      up_in = 2 * c;
    } else {
      sub = down(c, o.channels[level + 1], 1);  // the bottom layer
      up_in = c + o.channels[level + 1];
    }
    LayerPtr d = down(in, c, s);
    LayerPtr u = up(up_in, out, s, is_top);
    auto skip = std::make_shared<Skip>();
    skip->submodule = skip->register_module("submodule", sub);
    if (static_cast<int64_t>(level) + 1 <= o.deep_supervision) {
      skip->taps = context.taps;
      skip->tapped = static_cast<int64_t>(level) + 1;
    }
    auto m = std::make_shared<Seq>();
    m->add("0", d);
    m->add("1", skip);
    m->add("2", u);
    return m;
  }
};

// MONAI's UNet holds the tree as its child `model`: keys "model.0...".
LayerPtr build_unet(const BuildContext& context) {
  const ModelOptions& o = context.options;
  auto root = std::make_shared<Seq>();
  root->add("model", Builder{o, context}.block(o.in_channels, o.out_channels, 0, true));
  return root;
}

int64_t unet_top_channels(const ModelOptions& o) { return o.channels.front(); }

// The block of level l >= 1 ends with an up-sampling to channels[l - 1].
int64_t unet_decoder_channels(const ModelOptions& o, int64_t level) {
  return o.channels.at(static_cast<size_t>(level - 1));
}

}  // namespace

const Architecture kUNetArchitecture{ModelKind::kUNet,    "unet",         "UNet",
                                     NormKind::kInstance, &validate_unet, &unet_size_multiple,
                                     &unet_top_channels,  &build_unet,    &unet_decoder_channels};

}  // namespace volshard::detail
