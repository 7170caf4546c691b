#include "volshard/trainer/unet.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "volshard/core/limits.h"
#include "volshard/core/error.h"
#include "volshard/trainer/comm.h"

namespace volshard {

std::string to_string(NormKind norm) { return norm == NormKind::kBatch ? "batch" : "instance"; }

NormKind parse_norm_kind(const std::string& text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "instance") return NormKind::kInstance;
  if (lower == "batch") return NormKind::kBatch;
  throw std::invalid_argument("UNet: norm='" + text + "' must be instance or batch");
}

void UNetOptions::validate() const {
  if (in_channels < 1)
    throw std::invalid_argument("UNet: in_channels=" + std::to_string(in_channels) +
                                " must be >= 1");
  if (out_channels < 1)
    throw std::invalid_argument("UNet: out_channels=" + std::to_string(out_channels) +
                                " must be >= 1");
  if (channels.size() < 2)
    throw std::invalid_argument("UNet: channels needs at least 2 entries, got " +
                                std::to_string(channels.size()));
  if (strides.size() + 1 != channels.size())
    throw std::invalid_argument("UNet: strides has " + std::to_string(strides.size()) +
                                " entries, channels " + std::to_string(channels.size()) +
                                ": strides must have one fewer");
  for (size_t i = 0; i < channels.size(); ++i)
    if (channels[i] < 1 || channels[i] > 65536)
      throw std::invalid_argument("UNet: channels[" + std::to_string(i) + "]=" +
                                  std::to_string(channels[i]) + " must be in [1, 65536]");
  // A lower bound of the weights: one 3^3 convolution between consecutive
  // levels, down and up, in float32, with Adam's gradient and two moments.
  double weights = 27.0 * static_cast<double>(in_channels) * static_cast<double>(channels[0]);
  for (size_t i = 0; i + 1 < channels.size(); ++i)
    weights += 2 * 27.0 * static_cast<double>(channels[i]) * static_cast<double>(channels[i + 1]);
  std::string list;
  for (const int64_t c : channels) list += (list.empty() ? "" : ",") + std::to_string(c);
  check_fits_in_memory(16.0 * weights, "UNet: channels=" + list);
  for (size_t i = 0; i < strides.size(); ++i)
    if (strides[i] < 1 || strides[i] > 8)
      throw std::invalid_argument("UNet: strides[" + std::to_string(i) +
                                  "]=" + std::to_string(strides[i]) + " must be in [1, 8]");
  if (num_res_units < 0)
    throw std::invalid_argument("UNet: num_res_units=" + std::to_string(num_res_units) +
                                " must be >= 0");
  if (!(dropout >= 0.0 && dropout < 1.0))
    throw std::invalid_argument("UNet: dropout=" + std::to_string(dropout) + " must be in [0, 1)");
}

int64_t UNetOptions::size_multiple() const {
  int64_t m = 1;
  for (int64_t s : strides) m *= s;
  return m;
}

void UNetOptions::check_spatial_size(const std::array<int64_t, 3>& size,
                                     const std::string& what) const {
  const int64_t m = size_multiple();
  for (int a = 0; a < 3; ++a) {
    if (size[a] < 1 || size[a] % m != 0) {
      throw std::invalid_argument(what + " " + std::to_string(size[0]) + "x" +
                                  std::to_string(size[1]) + "x" + std::to_string(size[2]) +
                                  ": every side must be a positive multiple of " +
                                  std::to_string(m) + " (the product of the UNet strides)");
    }
  }
}

namespace {

// A module whose forward maps one tensor to one tensor: lets the tree below be
// built from named children exactly as MONAI names them.
struct Layer : torch::nn::Module {
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};
using LayerPtr = std::shared_ptr<Layer>;

// nn.Sequential with chosen child names ("0", "conv", "unit0", ...).
struct Seq : Layer {
  template <typename M>
  void add(const std::string& name, M module) {
    auto registered = register_module(name, module);
    steps.push_back([registered](const at::Tensor& x) { return registered->forward(x); });
  }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor y = x;
    for (auto& step : steps) y = step(y);
    return y;
  }
  std::vector<std::function<at::Tensor(const at::Tensor&)>> steps;
};

// Sum over ranks whose gradient is the sum of the ranks' gradients: the
// backward of an all-reduce is an all-reduce. Every rank runs forward and
// backward, so the collectives pair up.
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            Communicator* comm) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    at::Tensor y = x.clone();
    comm->allreduce_sum(y);
    return y;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    at::Tensor g = grads[0].contiguous().clone();
    comm->allreduce_sum(g);
    return {g, at::Tensor()};
  }
};

// BatchNorm3d whose training statistics cover the whole global batch
// (torch.nn.SyncBatchNorm) when a communicator with more than one rank is set;
// otherwise exactly BatchNorm3d. Same parameter and buffer names as
// nn.BatchNorm3d, so state_dict keys equal MONAI's.
struct SyncBatchNorm : Layer {
  explicit SyncBatchNorm(int64_t channels) {
    weight = register_parameter("weight", torch::ones({channels}));
    bias = register_parameter("bias", torch::zeros({channels}));
    running_mean = register_buffer("running_mean", torch::zeros({channels}));
    running_var = register_buffer("running_var", torch::ones({channels}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
  at::Tensor forward(const at::Tensor& x) override {
    if (!is_training() || comm == nullptr || comm->world_size() == 1) {
      if (is_training()) num_batches_tracked.add_(1);
      return at::batch_norm(x, weight, bias, running_mean, running_var, is_training(), kMomentum,
                            kEps, false);
    }
    num_batches_tracked.add_(1);
    const int64_t c = x.size(1);
    const std::vector<int64_t> dims{0, 2, 3, 4};
    const double local_count = static_cast<double>(x.numel() / c);
    // [sum, sum of squares, count] per channel, summed over ranks.
    at::Tensor stats =
        torch::cat({x.sum(dims), (x * x).sum(dims), torch::full({c}, local_count, x.options())});
    at::Tensor global = AllReduceSum::apply(stats, comm);
    at::Tensor count = global.narrow(0, 2 * c, c);
    at::Tensor mean = global.narrow(0, 0, c) / count;
    at::Tensor var = global.narrow(0, c, c) / count - mean * mean;
    {
      torch::NoGradGuard no_grad;
      const double n = count[0].item<double>();
      running_mean.mul_(1 - kMomentum).add_(mean.detach() * kMomentum);
      running_var.mul_(1 - kMomentum).add_(var.detach() * (n / std::max(n - 1, 1.0)) * kMomentum);
    }
    const auto shape = std::vector<int64_t>{1, c, 1, 1, 1};
    at::Tensor inv = torch::rsqrt(var + kEps);
    return (x - mean.view(shape)) * (inv * weight).view(shape) + bias.view(shape);
  }
  static constexpr double kMomentum = 0.1;
  static constexpr double kEps = 1e-5;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  Communicator* comm = nullptr;
};

struct Identity : Layer {
  at::Tensor forward(const at::Tensor& x) override { return x; }
};

struct Builder {
  const UNetOptions& o;
  std::vector<std::shared_ptr<SyncBatchNorm>>* batch_norms;

  // MONAI's ADN with ordering "NDA": norm, dropout, PReLU.
  std::shared_ptr<Seq> adn(int64_t channels) const {
    auto m = std::make_shared<Seq>();
    if (o.norm == NormKind::kInstance) {
      m->add("N", torch::nn::InstanceNorm3d(torch::nn::InstanceNorm3dOptions(channels)
                                                .eps(1e-5)
                                                .momentum(0.1)
                                                .affine(false)
                                                .track_running_stats(false)));
    } else {
      auto bn = std::make_shared<SyncBatchNorm>(channels);
      batch_norms->push_back(bn);
      m->add("N", bn);
    }
    m->add("D", torch::nn::Dropout(torch::nn::DropoutOptions(o.dropout)));
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
    std::function<at::Tensor(const at::Tensor&)> residual;
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
      auto r = unit->register_module(
          "residual", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, only_channels ? 1 : 3)
                                            .stride(stride)
                                            .padding(only_channels ? 0 : 1)));
      unit->residual = [r](const at::Tensor& x) { return r->forward(x); };
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

  struct Skip : Layer {
    at::Tensor forward(const at::Tensor& x) override {
      return torch::cat({x, submodule->forward(x)}, 1);
    }
    LayerPtr submodule;
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
    auto m = std::make_shared<Seq>();
    m->add("0", d);
    m->add("1", skip);
    m->add("2", u);
    return m;
  }
};

struct Net : torch::nn::Module {
  LayerPtr model;
};

}  // namespace

struct UNet::Impl {
  UNetOptions options;
  std::shared_ptr<Net> net = std::make_shared<Net>();
  std::vector<std::shared_ptr<SyncBatchNorm>> batch_norms;
};

UNet::UNet(UNetOptions options, uint64_t init_seed) : impl_(std::make_unique<Impl>()) {
  options.validate();
  impl_->options = std::move(options);
  Builder b{impl_->options, &impl_->batch_norms};
  impl_->net->model = impl_->net->register_module(
      "model", b.block(impl_->options.in_channels, impl_->options.out_channels, 0, true));

  // PyTorch's default initialisation, from our own generator so that the
  // weights depend on init_seed only (not on torch's global generator, which
  // other threads may use).
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(init_seed);
  double fan_in = 1;
  for (auto& p : impl_->net->named_parameters(true)) {
    at::Tensor& t = p.value();
    const std::string& key = p.key();
    if (key.size() >= 8 && key.compare(key.size() - 8, 8, "A.weight") == 0) {
      t.fill_(0.25);
    } else if (t.dim() == 5) {  // conv weight: kaiming_uniform(a=sqrt(5)) == U(+-1/sqrt(fan_in))
      fan_in = static_cast<double>(t.size(1) * t.size(2) * t.size(3) * t.size(4));
      t.uniform_(-1.0 / std::sqrt(fan_in), 1.0 / std::sqrt(fan_in), gen);
    } else if (key.find(".N.") != std::string::npos) {
      t.fill_(key.compare(key.size() - 6, 6, "weight") == 0 ? 1.0 : 0.0);
    } else {  // conv bias, drawn right after its weight
      t.uniform_(-1.0 / std::sqrt(fan_in), 1.0 / std::sqrt(fan_in), gen);
    }
  }
}

UNet::~UNet() = default;
UNet::UNet(UNet&&) noexcept = default;
UNet& UNet::operator=(UNet&&) noexcept = default;

at::Tensor UNet::forward(const at::Tensor& input) {
  const auto& o = impl_->options;
  if (input.dim() != 5 || input.size(1) != o.in_channels) {
    std::ostringstream s;
    s << "UNet: input of shape " << input.sizes() << " must be N x " << o.in_channels
      << " x X x Y x Z";
    throw std::invalid_argument(s.str());
  }
  o.check_spatial_size({input.size(2), input.size(3), input.size(4)}, "UNet: input spatial size");
  return impl_->net->model->forward(input);
}

NamedTensors UNet::state_dict() const {
  NamedTensors out;
  for (const auto& m : impl_->net->named_modules("", false)) {
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    for (const auto& p : m.value()->named_parameters(false))
      out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m.value()->named_buffers(false))
      out.emplace_back(prefix + b.key(), b.value());
  }
  return out;
}

NamedTensors UNet::named_parameters() const {
  NamedTensors out;
  for (const auto& p : impl_->net->named_parameters(true)) out.emplace_back(p.key(), p.value());
  return out;
}

std::vector<at::Tensor> UNet::parameters() const { return impl_->net->parameters(true); }

int64_t UNet::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : impl_->net->parameters(true)) n += p.numel();
  return n;
}

void UNet::load_state_dict(const NamedTensors& state, bool strict) {
  const NamedTensors mine = state_dict();
  std::map<std::string, const at::Tensor*> given;
  for (const auto& kv : state) given[kv.first] = &kv.second;
  std::set<std::string> known;
  for (const auto& kv : mine) {
    known.insert(kv.first);
    auto it = given.find(kv.first);
    if (it == given.end()) {
      if (strict)
        throw std::invalid_argument("UNet::load_state_dict: missing key '" + printable(kv.first) +
                                    "'");
      continue;
    }
    if (it->second->sizes() != kv.second.sizes()) {
      std::ostringstream s;
      s << "UNet::load_state_dict: key '" << kv.first << "' has shape " << it->second->sizes()
        << ", the model's is " << kv.second.sizes();
      throw std::invalid_argument(s.str());
    }
  }
  if (strict) {
    for (const auto& kv : state)
      if (!known.count(kv.first))
        throw std::invalid_argument("UNet::load_state_dict: unexpected key '" +
                                    printable(kv.first) +
                                    "' (another channels/strides/res-units/norm configuration?)");
  }
  torch::NoGradGuard no_grad;
  for (const auto& kv : mine) {
    auto it = given.find(kv.first);
    if (it != given.end()) const_cast<at::Tensor&>(kv.second).copy_(*it->second);
  }
}

void UNet::train(bool on) { impl_->net->train(on); }
bool UNet::is_training() const { return impl_->net->is_training(); }
void UNet::to(at::Device device) { impl_->net->to(device); }

void UNet::set_sync_batchnorm(Communicator* comm) {
  for (auto& bn : impl_->batch_norms) bn->comm = comm;
}

const UNetOptions& UNet::options() const { return impl_->options; }

std::string UNet::describe() const {
  std::ostringstream s;
  s << *impl_->net;
  return s.str();
}

}  // namespace volshard
