#include "volshard/trainer/serialize.h"

#include <ATen/ops/empty.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include "io/archive_io.h"
#include "volshard/core/error.h"
#include "volshard/core/file_io.h"
#include "volshard/core/torch_archive.h"

namespace volshard {
namespace detail {

std::vector<char> pickle_archive(const c10::IValue& value) {
  // torch::jit::pickle_save's steps, with tag_aggregates off.
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* p, size_t n) { pickled.insert(pickled.end(), p, p + n); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    const char* bytes = static_cast<const char*>(p);
    archive.insert(archive.end(), bytes, bytes + n);
    return n;
  });
  writer.writeRecord("data.pkl", pickled.data(), pickled.size());
  const std::vector<at::Tensor>& tensors = pickler.tensorData();
  // Each record's CRC-32 is the zip's, kept beside the record's name: two
  // records of one size whose names were swapped would pass their own
  // checks and load into each other's tensors. This list, one line per
  // record ("<name> <crc32 hex> <bytes>"), ties each name to its bytes;
  // torch.load ignores records it does not use, and the reader checks it.
  std::string manifest;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::jit::WriteableTensorData data = torch::jit::getWriteableTensorData(tensors[i]);
    const std::string name = "data/" + std::to_string(i);
    writer.writeRecord(name, data.data(), data.sizeInBytes());
    char line[64];
    std::snprintf(line, sizeof line, " %08x %zu\n", archive_crc32(data.data(), data.sizeInBytes()),
                  data.sizeInBytes());
    manifest += name + line;
  }
  writer.writeRecord(kRecordManifest, manifest.data(), manifest.size());
  writer.writeEndOfFile();
  return archive;
}

}  // namespace detail

namespace {

at::ScalarType scalar_type(const std::string& dtype, const std::string& what) {
  static const std::map<std::string, at::ScalarType> types{
      {"float32", at::kFloat},     {"float64", at::kDouble}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},     {"int32", at::kInt},
      {"int16", at::kShort},       {"int8", at::kChar},      {"uint8", at::kByte},
      {"bool", at::kBool}};
  const auto it = types.find(dtype);
  if (it == types.end()) throw std::runtime_error(what + ": unsupported tensor type " + dtype);
  return it->second;
}

}  // namespace

namespace detail {

at::Tensor tensor_of(const TorchTensorRecord& r, const std::string& what, StorageCopies* copies) {
  const at::ScalarType type = scalar_type(r.dtype, what);
  at::Tensor storage;
  const StorageCopies::key_type key{r.storage.get(), type};
  if (copies != nullptr) {
    if (const auto it = copies->find(key); it != copies->end()) storage = it->second;
  }
  if (!storage.defined()) {
    storage = at::empty({r.storage_numel}, type);
    if (r.storage_numel > 0) std::memcpy(storage.data_ptr(), r.storage->data(), r.storage->size());
    if (copies != nullptr) copies->emplace(key, storage);
  }
  // A view, not a clone (torch.load's tensors share storages too): the reader
  // checked that it lies inside its storage and holds no more elements, and
  // its storage is copied once however many tensors share it.
  return storage.as_strided(r.sizes, r.strides, r.storage_offset);
}

NamedTensors tensor_dict_of(const TorchValue& value, const std::string& what) {
  if (value.kind != TorchValue::Kind::kDict)
    throw std::runtime_error(what + ": holds a " + value.kind_name() + ", not a dict of tensors");
  NamedTensors out;
  StorageCopies copies;
  for (const auto& [k, v] : value.entries) {
    if (k.kind != TorchValue::Kind::kString)
      throw std::runtime_error(what + ": a key is a " + k.kind_name() + ", not a string");
    if (v.kind != TorchValue::Kind::kTensor)
      throw std::runtime_error(what + ": entry '" + printable(k.s) + "' is a " + v.kind_name() +
                               ", not a tensor");
    out.emplace_back(k.s, tensor_of(*v.tensor, what, &copies));
  }
  return out;
}

}  // namespace detail

std::vector<char> pickle_tensor_dict(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& kv : tensors)
    dict.insert(kv.first, kv.second.detach().to(at::kCPU).contiguous());
  return detail::pickle_archive(c10::IValue(dict));
}

NamedTensors unpickle_tensor_dict(const std::vector<char>& bytes, const std::string& what) {
  return detail::tensor_dict_of(
      read_torch_archive(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what), what);
}

NamedTensors load_tensor_dict(const std::string& path) {
  return detail::tensor_dict_of(read_torch_archive_file(path), path);
}

at::Tensor load_tensor(const std::string& path) {
  const TorchValue value = read_torch_archive_file(path);
  if (value.kind != TorchValue::Kind::kTensor)
    throw std::runtime_error(path + ": holds a " + value.kind_name() + ", not a tensor");
  return detail::tensor_of(*value.tensor, path, nullptr);
}

void save_tensor_dict(const std::string& path, const NamedTensors& tensors) {
  const std::vector<char> bytes = pickle_tensor_dict(tensors);
  write_file_atomic(path, {bytes.data()}, {bytes.size()});
}

}  // namespace volshard
