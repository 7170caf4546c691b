#pragma once
// Checkpoints that survive being killed mid-write and refuse to half-load.
//
// A checkpoint is a PyTorch archive (torch.load reads it in Python) holding
// {"format": "volshard-checkpoint", "version": 1, "meta": JSON text,
//  "model": {MONAI key: tensor}, "optimizer": uint8 tensor (LibTorch's
//  optimizer archive), "checksum": hex CRC-32 of all the above}. It is
// written to a temporary file beside the target, fsynced and renamed, so the
// previous checkpoint stays intact until the new one is complete.

#include <string>
#include <vector>

#include "volshard/trainer/model.h"

namespace volshard {

struct Checkpoint {
  std::string meta_json;        ///< the trainer's state: epoch, step, sampler state, seeds, config
  NamedTensors model;           ///< state_dict, MONAI keys
  std::vector<char> optimizer;  ///< torch::optim archive bytes
};

/// Atomic; throws std::runtime_error naming the path (disk full, no
/// permission); the previous file at `path` is untouched then.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

/// Verifies the format, version and checksum before returning anything;
/// throws std::runtime_error naming the path and what is wrong (missing,
/// truncated, corrupt, another format).
Checkpoint load_checkpoint(const std::string& path);

/// The weights in `path`: a checkpoint's model (verified as load_checkpoint
/// does) or a state_dict .pt (model.pt, or one saved by Python/MONAI).
NamedTensors load_model_weights(const std::string& path);

}  // namespace volshard
