#pragma once
// Helpers shared by the trainer's .cpp files that read and write PyTorch
// archives (io/, engine's optimizer state, audit/). Every archive is
// read by core's read_torch_archive: no byte of a file reaches LibTorch's
// unpickler.

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "volshard/core/torch_archive.h"
#include "volshard/trainer/model.h"

namespace c10 {
struct IValue;
}

namespace volshard::detail {

/// The bytes of a torch.save zip archive holding `value`, as
/// torch::jit::pickle_save writes them but with plain dicts and lists: no
/// torch.jit._pickle.restore_type_tag, which torch.load's default
/// (weights_only=True, torch >= 2.6) refuses. Tensors are copied to the CPU.
std::vector<char> pickle_archive(const c10::IValue& value);

/// The CPU copies of an archive's storages made so far, by the reader's bytes and type.
using StorageCopies = std::map<std::pair<const void*, at::ScalarType>, at::Tensor>;

/// A tensor of an archive read by read_torch_archive (core/torch_archive.h):
/// a view of a CPU copy of its storage, made once per storage in `copies`
/// (nullptr: a copy of its own). Tensors that share a storage in the file share
/// it here, so an archive's tensors take at most its storages' bytes.
at::Tensor tensor_of(const TorchTensorRecord& record, const std::string& what,
                     StorageCopies* copies);

/// A {name: tensor} dict of such an archive (its tensors sharing their
/// storages' copies), or std::runtime_error naming `what` and the entry that is not.
NamedTensors tensor_dict_of(const TorchValue& value, const std::string& what);

}  // namespace volshard::detail
