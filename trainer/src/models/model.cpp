// The model registry and Model: which architectures there are, their shared
// fields' checks, the norms they share, MONAI-keyed state_dicts and seeded
// initialisation. The architectures themselves: unet.cpp, segresnet.cpp.
#include "volshard/trainer/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "models/layers.h"
#include "volshard/core/error.h"
#include "volshard/core/field.h"
#include "volshard/trainer/comm.h"

namespace volshard {
namespace {

// The registry: one entry per architecture, in the order --help lists them.
const std::vector<const detail::Architecture*>& architectures() {
  static const std::vector<const detail::Architecture*> kAll{&detail::kUNetArchitecture,
                                                             &detail::kSegResNetArchitecture};
  return kAll;
}

const detail::Architecture& architecture(ModelKind kind) {
  for (const detail::Architecture* a : architectures())
    if (a->kind == kind) return *a;
  throw std::logic_error("model: no architecture registered for this kind");
}

}  // namespace

const std::vector<std::pair<std::string, ModelKind>>& enum_names(ModelKind) {
  static const std::vector<std::pair<std::string, ModelKind>> kNames = [] {
    std::vector<std::pair<std::string, ModelKind>> names;
    for (const detail::Architecture* a : architectures()) names.emplace_back(a->key, a->kind);
    return names;
  }();
  return kNames;
}

const std::vector<std::pair<std::string, NormKind>>& enum_names(NormKind) {
  static const std::vector<std::pair<std::string, NormKind>> kNames{
      {"auto", NormKind::kAuto},
      {"instance", NormKind::kInstance},
      {"batch", NormKind::kBatch},
      {"group", NormKind::kGroup}};
  return kNames;
}

std::string ModelOptions::name() const { return architecture(kind).name; }

NormKind ModelOptions::resolved_norm() const {
  return norm == NormKind::kAuto ? architecture(kind).default_norm : norm;
}

void ModelOptions::validate() const {
  const std::string who = name() + ": ";
  // The rows' bounds (options.h); in_channels 0 there means the images', resolved by now.
  for_each_model_field(*this, CheckFieldBounds{name()});
  if (in_channels < 1)
    throw std::invalid_argument(who + "in_channels=" + std::to_string(in_channels) +
                                " must be >= 1");
  if (deep_supervision > 0 && architecture(kind).decoder_channels == nullptr)
    throw std::invalid_argument(who + "deep_supervision=" + std::to_string(deep_supervision) +
                                ": only model=unet has deep supervision here");
  architecture(kind).validate(*this);
}

int64_t ModelOptions::size_multiple() const { return architecture(kind).size_multiple(*this); }

int64_t ModelOptions::top_channels() const { return architecture(kind).top_channels(*this); }

void ModelOptions::check_spatial_size(const std::array<int64_t, 3>& size,
                                      const std::string& what) const {
  const int64_t m = size_multiple();
  for (int a = 0; a < 3; ++a) {
    if (size[a] < 1 || size[a] % m != 0) {
      throw FieldError(what + " " + std::to_string(size[0]) + "x" + std::to_string(size[1]) + "x" +
                       std::to_string(size[2]) + ": every side must be a positive multiple of " +
                       std::to_string(m) + " (the " + name() + "'s down-sampling)");
    }
  }
}

namespace detail {

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

SyncBatchNorm::SyncBatchNorm(int64_t channels) {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

at::Tensor SyncBatchNorm::forward(const at::Tensor& x) {
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

at::Tensor SeededDropout::forward(const at::Tensor& x) {
  if (!is_training() || p == 0) return x;
  std::vector<int64_t> shape = x.sizes().vec();
  if (channel_wise)
    for (size_t d = 2; d < shape.size(); ++d) shape[d] = 1;
  // keep / (1 - p) on the generator's device (the CPU), as torch scales.
  const at::Tensor keep =
      at::empty(shape, x.options().device(at::kCPU)).bernoulli_(1 - p, *generator).div_(1 - p);
  return x * keep.to(x.device());
}

Forward BuildContext::dropout(torch::nn::Module& parent, const std::string& name,
                              bool channel_wise) const {
  return child(parent, name,
               std::make_shared<SeededDropout>(options.dropout, channel_wise, dropout_generator));
}

Forward BuildContext::norm(torch::nn::Module& parent, const std::string& name,
                           int64_t channels) const {
  switch (options.resolved_norm()) {
    case NormKind::kBatch: {
      auto bn = std::make_shared<SyncBatchNorm>(channels);
      batch_norms->push_back(bn);
      return child(parent, name, bn);
    }
    case NormKind::kGroup:
      return child(parent, name,
                   torch::nn::GroupNorm(
                       torch::nn::GroupNormOptions(options.num_groups, channels).eps(1e-5)));
    default:
      return child(parent, name,
                   torch::nn::InstanceNorm3d(torch::nn::InstanceNorm3dOptions(channels)
                                                 .eps(1e-5)
                                                 .momentum(0.1)
                                                 .affine(false)
                                                 .track_running_stats(false)));
  }
}

}  // namespace detail

struct Model::Impl {
  ModelOptions options;
  detail::LayerPtr net;
  std::vector<std::shared_ptr<detail::SyncBatchNorm>> batch_norms;
  at::Generator dropout_generator = at::make_generator<at::CPUGeneratorImpl>(0);
  detail::DecoderTaps taps;
  std::vector<torch::nn::Conv3d> heads;  ///< deep supervision: level k + 1's head
};

Model::Model(ModelOptions options, uint64_t init_seed) : impl_(std::make_unique<Impl>()) {
  options.validate();
  impl_->options = std::move(options);
  const detail::BuildContext context{impl_->options, &impl_->batch_norms, &impl_->dropout_generator,
                                     &impl_->taps};
  const detail::Architecture& arch = architecture(impl_->options.kind);
  impl_->net = arch.build(context);
  // Deep supervision's heads, after MONAI's tree (its keys and initial
  // weights stay as without them): children of the root that its forward
  // does not run.
  if (impl_->options.deep_supervision > 0) {
    torch::nn::ModuleList heads;
    for (int64_t level = 1; level <= impl_->options.deep_supervision; ++level) {
      impl_->heads.emplace_back(torch::nn::Conv3dOptions(
          arch.decoder_channels(impl_->options, level), impl_->options.out_channels, 1));
      heads->push_back(impl_->heads.back());
    }
    impl_->net->register_module("deep_supervision", heads);
  }

  // PyTorch's default initialisation, from our own generator so that the
  // weights depend on init_seed only (not on torch's global generator, which
  // other threads may use): each convolution's weight, kaiming_uniform(a =
  // sqrt(5)) == U(+-1/sqrt(fan_in)), then its bias from the same bound, in
  // module order. Norms keep 1 and 0, PReLU 0.25, as constructed.
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(init_seed);
  for (const auto& m : impl_->net->modules(/*include_self=*/true)) {
    at::Tensor weight, bias;
    if (auto* conv = m->as<torch::nn::Conv3d>()) {
      weight = conv->weight, bias = conv->bias;
    } else if (auto* up = m->as<torch::nn::ConvTranspose3d>()) {
      weight = up->weight, bias = up->bias;
    } else {
      continue;
    }
    // fan_in as torch computes it: size(1) x the kernel's voxels (for a
    // transposed convolution size(1) is its output channels).
    const double fan_in =
        static_cast<double>(weight.size(1) * weight.size(2) * weight.size(3) * weight.size(4));
    const double bound = 1.0 / std::sqrt(fan_in);
    weight.uniform_(-bound, bound, gen);
    if (bias.defined()) bias.uniform_(-bound, bound, gen);
  }
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

at::Tensor Model::forward(const at::Tensor& input) {
  const auto& o = impl_->options;
  if (input.dim() != 5 || input.size(1) != o.in_channels) {
    std::ostringstream s;
    s << o.name() << ": input of shape " << input.sizes() << " must be N x " << o.in_channels
      << " x X x Y x Z";
    throw std::invalid_argument(s.str());
  }
  o.check_spatial_size({input.size(2), input.size(3), input.size(4)},
                       o.name() + ": input spatial size");
  return impl_->net->forward(input);
}

std::vector<at::Tensor> Model::training_outputs(const at::Tensor& input) {
  if (impl_->heads.empty() || !is_training()) return {forward(input)};
  // The taps are on for this forward only, and emptied whatever it throws.
  struct Tapping {
    detail::DecoderTaps& taps;
    explicit Tapping(detail::DecoderTaps& t) : taps(t) {
      taps.outputs.clear();
      taps.on = true;
    }
    ~Tapping() {
      taps.on = false;
      taps.outputs.clear();
    }
  } tapping(impl_->taps);
  std::vector<at::Tensor> outputs{forward(input)};
  auto tapped = impl_->taps.outputs;  // the deepest first: the recursion returns upwards
  std::sort(tapped.begin(), tapped.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [level, features] : tapped)
    outputs.push_back(impl_->heads.at(static_cast<size_t>(level - 1))->forward(features));
  return outputs;
}

NamedTensors Model::state_dict() const {
  NamedTensors out;
  for (const auto& m : impl_->net->named_modules("", true)) {
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    for (const auto& p : m.value()->named_parameters(false))
      out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m.value()->named_buffers(false))
      out.emplace_back(prefix + b.key(), b.value());
  }
  return out;
}

NamedTensors Model::named_parameters() const {
  NamedTensors out;
  for (const auto& p : impl_->net->named_parameters(true)) out.emplace_back(p.key(), p.value());
  return out;
}

std::vector<at::Tensor> Model::parameters() const { return impl_->net->parameters(true); }

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : impl_->net->parameters(true)) n += p.numel();
  return n;
}

void Model::load_state_dict(const NamedTensors& state, bool strict) {
  const std::string who = impl_->options.name() + "::load_state_dict: ";
  const NamedTensors mine = state_dict();
  std::map<std::string, const at::Tensor*> given;
  for (const auto& kv : state) given[kv.first] = &kv.second;
  std::set<std::string> known;
  for (const auto& kv : mine) {
    known.insert(kv.first);
    auto it = given.find(kv.first);
    if (it == given.end()) {
      if (strict) throw std::invalid_argument(who + "missing key '" + printable(kv.first) + "'");
      continue;
    }
    if (it->second->sizes() != kv.second.sizes()) {
      std::ostringstream s;
      s << who << "key '" << kv.first << "' has shape " << it->second->sizes()
        << ", the model's is " << kv.second.sizes();
      throw std::invalid_argument(s.str());
    }
  }
  if (strict) {
    for (const auto& kv : state)
      if (!known.count(kv.first))
        throw std::invalid_argument(who + "unexpected key '" + printable(kv.first) +
                                    "' (another model, or another configuration of it?)");
  }
  torch::NoGradGuard no_grad;
  for (const auto& kv : mine) {
    auto it = given.find(kv.first);
    if (it != given.end()) const_cast<at::Tensor&>(kv.second).copy_(*it->second);
  }
}

void Model::train(bool on) { impl_->net->train(on); }
bool Model::is_training() const { return impl_->net->is_training(); }
void Model::to(at::Device device) { impl_->net->to(device); }

void Model::to_channels_last() {
  torch::NoGradGuard no_grad;
  // Parameters in place (set_data keeps the tensor an optimizer holds); 5-d
  // ones only: the layout is a convolution's.
  for (at::Tensor& t : impl_->net->parameters(true))
    if (t.dim() == 5) t.set_data(t.data().contiguous(at::MemoryFormat::ChannelsLast3d));
}

at::Device Model::device() const {
  const auto params = impl_->net->parameters(true);
  return params.empty() ? at::Device(at::kCPU) : params.front().device();
}

at::Tensor Model::forward_from_cpu(const at::Tensor& input) {
  const at::Device d = device();
  if (d.is_cpu()) return forward(input);
  return forward(input.to(d, /*non_blocking=*/true)).to(at::kCPU);
}

void Model::seed_dropout(uint64_t seed) {
  const std::lock_guard<std::mutex> lock(impl_->dropout_generator.mutex());
  impl_->dropout_generator.set_current_seed(seed);
}

void Model::set_sync_batchnorm(Communicator* comm) {
  for (auto& bn : impl_->batch_norms) bn->comm = comm;
}

const ModelOptions& Model::options() const { return impl_->options; }

std::string Model::describe() const {
  std::ostringstream s;
  s << *impl_->net;
  return s.str();
}

}  // namespace volshard
