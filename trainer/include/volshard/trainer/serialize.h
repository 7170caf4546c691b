#pragma once
// Tensors in PyTorch's file format (torch.save / torch.load zip archives),
// so model weights move between volshard and Python/MONAI.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "volshard/trainer/model.h"

namespace volshard {

/// A {name: tensor} dict as torch.save writes it (dict or OrderedDict, e.g.
/// torch.save(model.state_dict(), path)). Throws std::runtime_error naming the
/// path when it cannot be read, is not a PyTorch archive, or holds anything
/// but a dict of tensors.
NamedTensors load_tensor_dict(const std::string& path);
/// A single tensor saved with torch.save.
at::Tensor load_tensor(const std::string& path);

/// Bytes that Python's torch.load reads as {name: tensor}, in order. Tensors
/// are copied to the CPU.
std::vector<char> pickle_tensor_dict(const NamedTensors& tensors);
/// The inverse; `what` names the source in errors.
NamedTensors unpickle_tensor_dict(const std::vector<char>& bytes, const std::string& what);

/// Writes pickle_tensor_dict(tensors) atomically (temporary file, fsync,
/// rename): a failure leaves `path` as it was and throws std::runtime_error
/// naming it.
void save_tensor_dict(const std::string& path, const NamedTensors& tensors);

}  // namespace volshard
