#include "volshard/trainer/serialize.h"

#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

#include "volshard/datasets/nifti_header.h"

namespace volshard {
namespace {

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(path + ": read failed");
  return bytes;
}

c10::IValue unpickle(const std::vector<char>& bytes, const std::string& what) {
  try {
    return torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (const size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw std::runtime_error(what + ": not a readable PyTorch archive (" + msg + ")");
  }
}

}  // namespace

std::vector<char> pickle_tensor_dict(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& kv : tensors) dict.insert(kv.first, kv.second.detach().to(at::kCPU).contiguous());
  return torch::pickle_save(c10::IValue(dict));
}

NamedTensors unpickle_tensor_dict(const std::vector<char>& bytes, const std::string& what) {
  const c10::IValue value = unpickle(bytes, what);
  if (!value.isGenericDict()) throw std::runtime_error(what + ": holds a " + value.tagKind() + ", not a dict of tensors");
  NamedTensors out;
  for (const auto& kv : value.toGenericDict()) {
    if (!kv.key().isString()) throw std::runtime_error(what + ": a key is a " + kv.key().tagKind() + ", not a string");
    if (!kv.value().isTensor())
      throw std::runtime_error(what + ": entry '" + kv.key().toStringRef() + "' is a " + kv.value().tagKind() +
                               ", not a tensor");
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  return out;
}

NamedTensors load_tensor_dict(const std::string& path) { return unpickle_tensor_dict(read_bytes(path), path); }

at::Tensor load_tensor(const std::string& path) {
  const c10::IValue value = unpickle(read_bytes(path), path);
  if (!value.isTensor()) throw std::runtime_error(path + ": holds a " + value.tagKind() + ", not a tensor");
  return value.toTensor();
}

void save_tensor_dict(const std::string& path, const NamedTensors& tensors) {
  const std::vector<char> bytes = pickle_tensor_dict(tensors);
  write_file_atomic(path, {bytes.data()}, {bytes.size()});
}

}  // namespace volshard
