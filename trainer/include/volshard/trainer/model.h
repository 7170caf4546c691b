#pragma once
// The networks `volshard train` builds, MONAI's own in LibTorch with MONAI's
// exact module trees: state_dict() keys, shapes and order equal MONAI's, so
// weights move both ways (see README, "Trainer"). One registry (model.cpp)
// names each architecture, its defaults and its builder; every caller goes
// through Model.
//
// unet:      monai.networks.nets.UNet(spatial_dims=3, ...)
// segresnet: monai.networks.nets.SegResNet(spatial_dims=3, ...), upsample_mode
//            nontrainable, use_conv_final (the BraTS tutorial's network)

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/field.h"

namespace volshard {

class Communicator;

enum class ModelKind { kUNet, kSegResNet };

enum class NormKind {
  kAuto,      ///< the architecture's MONAI default: instance (UNet), group (SegResNet)
  kInstance,  ///< InstanceNorm3d(affine=False, no running stats)
  kBatch,     ///< BatchNorm3d; synchronised across ranks when a Communicator is set
  kGroup,     ///< GroupNorm(num_groups, affine=True)
};

/// The names of the values, as the JSON and the flags spell them.
const std::vector<std::pair<std::string, ModelKind>>& enum_names(ModelKind);
const std::vector<std::pair<std::string, NormKind>>& enum_names(NormKind);

struct ModelOptions {
  ModelKind kind = ModelKind::kUNet;
  int64_t in_channels = 1;
  int64_t out_channels = 1;
  // UNet
  std::vector<int64_t> channels{16, 32, 64, 128, 256};  ///< >= 2 levels
  std::vector<int64_t> strides{2, 2, 2, 2};             ///< channels.size() - 1 entries
  int64_t num_res_units = 2;                            ///< 0: plain convolutions
  /// Decoder levels below the output also scored in training (nnU-Net's deep
  /// supervision): level l (1 .. this) has a 1x1x1 head to out_channels on
  /// the output of the block that ends at 1 / (strides' product to l) of the
  /// input's size. At most channels.size() - 2; 0: none, MONAI's UNet exactly.
  int64_t deep_supervision = 0;
  // SegResNet
  int64_t init_filters = 8;                      ///< level k has init_filters * 2^k channels
  std::vector<int64_t> blocks_down{1, 2, 2, 4};  ///< residual blocks per level, down
  std::vector<int64_t> blocks_up{1, 1, 1};       ///< per level, up: one fewer than blocks_down
  // Both
  NormKind norm = NormKind::kAuto;
  int64_t num_groups = 8;  ///< group norm
  double dropout = 0.0;    ///< in [0, 1): UNet's ADN dropout, SegResNet's dropout_prob

  /// "UNet" or "SegResNet", for messages.
  std::string name() const;
  /// norm, with kAuto replaced by the architecture's default.
  NormKind resolved_norm() const;
  /// Throws std::invalid_argument naming the field.
  void validate() const;
  /// Spatial sizes must be multiples of this (the product of the strides).
  int64_t size_multiple() const;
  /// Feature channels at the input's resolution (UNet: channels[0],
  /// SegResNet: init_filters), for memory estimates.
  int64_t top_channels() const;
  /// Throws FieldError (`what` may hold field_refs) naming the size unless each
  /// is a positive multiple of size_multiple() (MONAI fails later, with a size error).
  void check_spatial_size(const std::array<int64_t, 3>& size, const std::string& what) const;
};

/// The network's fields, shared by train and predict.
template <class Self, class Visit>
void for_each_model_field(Self& m, Visit&& visit) {
  visit(Field("model",
              "the network: unet (MONAI's UNet) or segresnet (MONAI's SegResNet, the BraTS "
              "tutorial's)")
            .kept_on_resume(),
        m.kind);
  visit(Field("in_channels", "input channels of the network (0: the images' channels)")
            .kept_on_resume()
            .at_least(0),
        m.in_channels);
  visit(Field("out_channels", "output channels of the network (classes with softmax)")
            .kept_on_resume()
            .at_least(1),
        m.out_channels);
  visit(Field("channels", "unet: feature channels per level, comma-separated").kept_on_resume(),
        m.channels);
  visit(Field("strides", "unet: down-sampling stride per level, comma-separated (one fewer)")
            .kept_on_resume(),
        m.strides);
  visit(Field("res_units", "unet: residual units per block (0: plain convolutions)")
            .kept_on_resume()
            .at_least(0),
        m.num_res_units);
  visit(Field("deep_supervision",
              "unet: decoder levels below the output also scored in training, each against the "
              "labels down-sampled to its size (nearest-exact), weighted 1, 1/2, 1/4, ... as "
              "MONAI's DeepSupervisionLoss (nnU-Net's deep supervision); 0: off. The heads are "
              "`deep_supervision.<k>` in the weights, unused in inference")
            .kept_on_resume()
            .at_least(0),
        m.deep_supervision);
  visit(Field("init_filters", "segresnet: channels of the first level (doubling per level)")
            .kept_on_resume()
            .at_least(1),
        m.init_filters);
  visit(Field("blocks_down", "segresnet: residual blocks per level going down, comma-separated")
            .kept_on_resume(),
        m.blocks_down);
  visit(Field("blocks_up",
              "segresnet: residual blocks per level going up, comma-separated (one fewer)")
            .kept_on_resume(),
        m.blocks_up);
  visit(Field("norm",
              "normalisation (auto: the model's MONAI default, instance for unet, group for "
              "segresnet; batch: SyncBatchNorm over ranks; group: GroupNorm)")
            .kept_on_resume(),
        m.norm);
  visit(Field("num_groups", "group norm: channel groups")
            .kept_on_resume()
            .at_least(1)
            .at_most(4096),
        m.num_groups);
  visit(Field("dropout", "dropout probability (segresnet: Dropout3d after the first convolution)")
            .kept_on_resume()
            .at_least(0)
            .below(1),
        m.dropout);
}

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// The network. Parameters are float32 on the CPU after construction.
/// Not thread-safe; one per rank.
class Model {
 public:
  /// Weights are drawn as PyTorch's defaults (convolutions uniform
  /// +-1/sqrt(fan_in), PReLU 0.25, norms 1 and 0) from a private generator
  /// seeded with `init_seed`: the same seed gives the same weights on any
  /// machine and thread.
  explicit Model(ModelOptions options, uint64_t init_seed = 0);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  /// N x in_channels x X x Y x Z -> N x out_channels x X x Y x Z logits.
  at::Tensor forward(const at::Tensor& input);
  /// What the training loss scores: {forward(input)} alone, or, in training
  /// with deep_supervision = D, that followed by the heads' logits of levels
  /// 1 .. D (each N x out_channels x the level's size).
  std::vector<at::Tensor> training_outputs(const at::Tensor& input);

  /// MONAI's state_dict(): parameters and buffers, module by module.
  NamedTensors state_dict() const;
  NamedTensors named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  int64_t num_parameters() const;

  /// Copies values in. Throws std::invalid_argument naming the first missing,
  /// unexpected (if strict) or mis-shaped key; nothing is copied then.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  void train(bool on = true);
  bool is_training() const;
  /// Moves parameters and buffers (e.g. to CUDA), in place: tensors an
  /// optimizer holds follow.
  void to(at::Device device);
  /// The 5-d weights (convolutions) in channels-last 3D layout (NDHWC,
  /// torch.channels_last_3d), in place: the same values; cuDNN's NDHWC
  /// kernels on a GPU. state_dict() and model.pt hold them as before.
  void to_channels_last();
  /// Where the parameters are.
  at::Device device() const;
  /// The network on its device for a CPU tensor: forward(x moved to
  /// device()) moved back to the CPU, as MONAI's sliding_window_inference
  /// with sw_device = the GPU and device = the CPU (windows on the GPU, the
  /// stitched volume in host memory).
  at::Tensor forward_from_cpu(const at::Tensor& input);
  /// Restarts the dropout masks' generator (the model's own, not torch's
  /// global one) at `seed`: the trainer seeds it per rank, step and
  /// micro-batch, so reruns and resumed runs draw the same masks.
  void seed_dropout(uint64_t seed);
  /// BatchNorm layers all-reduce their batch statistics over `comm` in
  /// training (SyncBatchNorm). nullptr: local statistics.
  void set_sync_batchnorm(Communicator* comm);

  const ModelOptions& options() const;
  /// The module tree as PyTorch prints it (for logs and tests).
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace volshard
