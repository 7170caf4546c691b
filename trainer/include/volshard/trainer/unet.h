#pragma once
// MONAI's UNet (monai.networks.nets.UNet, spatial_dims 3) in LibTorch, with
// MONAI's exact module tree: state_dict() keys, shapes and order equal
// MONAI's, so weights move both ways (see README, "Trainer").

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace volshard {

class Communicator;

enum class NormKind {
  kInstance,  ///< InstanceNorm3d(affine=False, no running stats), MONAI's default
  kBatch,     ///< BatchNorm3d; synchronised across ranks when a Communicator is set
};
std::string to_string(NormKind norm);
NormKind parse_norm_kind(const std::string& text);  ///< "instance" | "batch" (any case)

struct UNetOptions {
  int64_t in_channels = 1;
  int64_t out_channels = 1;
  std::vector<int64_t> channels{16, 32, 64, 128, 256};  ///< >= 2 levels
  std::vector<int64_t> strides{2, 2, 2, 2};             ///< channels.size() - 1 entries
  int64_t num_res_units = 2;                            ///< 0: plain convolutions
  NormKind norm = NormKind::kInstance;
  double dropout = 0.0;  ///< in [0, 1)
  /// Throws std::invalid_argument naming the field.
  void validate() const;
  /// Spatial sizes must be multiples of this (the product of the strides).
  int64_t size_multiple() const;
  /// Throws std::invalid_argument naming the size unless each is a positive
  /// multiple of size_multiple() (MONAI fails later, with a cat size error).
  void check_spatial_size(const std::array<int64_t, 3>& size, const std::string& what) const;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// The network. Parameters are float32 on the CPU after construction.
/// Not thread-safe; one per rank.
class UNet {
 public:
  /// Weights are drawn as PyTorch's defaults (uniform +-1/sqrt(fan_in),
  /// PReLU 0.25) from a private generator seeded with `init_seed`: the same
  /// seed gives the same weights on any machine and thread.
  explicit UNet(UNetOptions options, uint64_t init_seed = 0);
  ~UNet();
  UNet(UNet&&) noexcept;
  UNet& operator=(UNet&&) noexcept;

  /// N x in_channels x X x Y x Z -> N x out_channels x X x Y x Z logits.
  at::Tensor forward(const at::Tensor& input);

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
  /// Moves parameters and buffers (e.g. to CUDA).
  void to(at::Device device);
  /// BatchNorm layers all-reduce their batch statistics over `comm` in
  /// training (SyncBatchNorm). nullptr: local statistics.
  void set_sync_batchnorm(Communicator* comm);

  const UNetOptions& options() const;
  /// The module tree as PyTorch prints it (for logs and tests).
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace volshard
