#include "io/checkpoint.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "io/archive_io.h"
#include "volshard/core/file_io.h"
#include "volshard/trainer/serialize.h"
#include "volshard/volume_io/nifti_header.h"

namespace volshard {
namespace {

constexpr const char* kFormat = "volshard-checkpoint";
constexpr int64_t kVersion = 1;

std::string checksum(const Checkpoint& c) {
  uint32_t crc = archive_crc32(c.meta_json.data(), c.meta_json.size());
  for (const auto& kv : c.model) {
    crc = archive_crc32(kv.first.data(), kv.first.size(), crc);
    const at::Tensor t = kv.second.detach().to(at::kCPU).contiguous();
    crc = archive_crc32(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), crc);
  }
  crc = archive_crc32(c.optimizer.data(), c.optimizer.size(), crc);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  c10::Dict<std::string, at::Tensor> model;
  for (const auto& kv : c.model)
    model.insert(kv.first, kv.second.detach().to(at::kCPU).contiguous());
  at::Tensor optimizer = at::empty({static_cast<int64_t>(c.optimizer.size())}, at::kByte);
  if (!c.optimizer.empty())
    std::memcpy(optimizer.data_ptr(), c.optimizer.data(), c.optimizer.size());
  dict.insert("format", std::string(kFormat));
  dict.insert("version", kVersion);
  dict.insert("meta", c.meta_json);
  dict.insert("model", model);
  dict.insert("optimizer", optimizer);
  dict.insert("checksum", checksum(c));
  const std::vector<char> bytes = detail::pickle_archive(c10::IValue(dict));
  write_file_atomic(path, {bytes.data()}, {bytes.size()});
}

namespace {

bool has_format_entry(const TorchValue& value) {
  return value.kind == TorchValue::Kind::kDict && value.find("format") != nullptr;
}

Checkpoint checkpoint_from(const TorchValue& value, const std::string& path) {
  auto fail = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  if (value.kind != TorchValue::Kind::kDict) fail("not a volshard checkpoint (not a dict)");
  auto get = [&](const char* key) -> const TorchValue& {
    const TorchValue* v = value.find(key);
    if (v == nullptr) fail(std::string("not a volshard checkpoint (no '") + key + "' entry)");
    return *v;
  };
  using Kind = TorchValue::Kind;
  if (get("format").kind != Kind::kString || get("format").s != kFormat)
    fail("not a volshard checkpoint (format)");
  if (get("version").kind != Kind::kInt || get("version").i != kVersion)
    fail("checkpoint version " +
         (get("version").kind == Kind::kInt ? std::to_string(get("version").i) : "?") +
         " is not supported (expected " + std::to_string(kVersion) + ")");
  Checkpoint c;
  const TorchValue& optimizer = get("optimizer");
  if (get("meta").kind != Kind::kString || get("model").kind != Kind::kDict ||
      optimizer.kind != Kind::kTensor || get("checksum").kind != Kind::kString)
    fail("not a volshard checkpoint (entry types)");
  c.meta_json = get("meta").s;
  c.model = detail::tensor_dict_of(get("model"), path);
  const TorchTensorRecord& bytes = *optimizer.tensor;
  if (bytes.dtype != "uint8" || bytes.sizes.size() != 1 || bytes.storage_offset != 0 ||
      (bytes.sizes[0] > 1 && bytes.strides[0] != 1))
    fail("not a volshard checkpoint (optimizer state is not a byte vector)");
  c.optimizer.assign(bytes.storage->begin(), bytes.storage->begin() + bytes.sizes[0]);
  const std::string expected = get("checksum").s;
  const std::string actual = checksum(c);
  if (expected != actual)
    fail("checksum mismatch (stored " + expected + ", computed " + actual +
         "): corrupt checkpoint");
  return c;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path) {
  return checkpoint_from(read_torch_archive_file(path), path);
}

NamedTensors load_model_weights(const std::string& path) {
  const TorchValue value = read_torch_archive_file(path);
  // A state_dict's entries are tensors; a checkpoint says what it is.
  if (has_format_entry(value)) return checkpoint_from(value, path).model;
  return detail::tensor_dict_of(value, path);
}

}  // namespace volshard
