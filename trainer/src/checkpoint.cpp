#include "volshard/trainer/checkpoint.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "archive_io.h"
#include "volshard/core/file_io.h"
#include "volshard/datasets/nifti_header.h"
#include "volshard/trainer/serialize.h"

namespace volshard {
namespace {

constexpr const char* kFormat = "volshard-checkpoint";
constexpr int64_t kVersion = 1;

uLong crc_bytes(uLong crc, const void* data, size_t size) {
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {  // crc32 takes a uInt length
    const uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    size -= chunk;
  }
  return crc;
}

std::string checksum(const Checkpoint& c) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc_bytes(crc, c.meta_json.data(), c.meta_json.size());
  for (const auto& kv : c.model) {
    crc = crc_bytes(crc, kv.first.data(), kv.first.size());
    const at::Tensor t = kv.second.detach().to(at::kCPU).contiguous();
    crc = crc_bytes(crc, t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  }
  crc = crc_bytes(crc, c.optimizer.data(), c.optimizer.size());
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
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

bool has_format_entry(const c10::IValue& value) {
  return value.isGenericDict() && value.toGenericDict().contains("format");
}

Checkpoint checkpoint_from(const c10::IValue& value, const std::string& path) {
  auto fail = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  if (!value.isGenericDict()) fail("not a volshard checkpoint (not a dict)");
  const auto dict = value.toGenericDict();
  auto get = [&](const char* key) {
    if (!dict.contains(key))
      fail(std::string("not a volshard checkpoint (no '") + key + "' entry)");
    return dict.at(key);
  };
  if (!get("format").isString() || get("format").toStringRef() != kFormat)
    fail("not a volshard checkpoint (format)");
  if (!get("version").isInt() || get("version").toInt() != kVersion)
    fail("checkpoint version " +
         (get("version").isInt() ? std::to_string(get("version").toInt()) : "?") +
         " is not supported (expected " + std::to_string(kVersion) + ")");
  Checkpoint c;
  if (!get("meta").isString() || !get("model").isGenericDict() || !get("optimizer").isTensor() ||
      !get("checksum").isString())
    fail("not a volshard checkpoint (entry types)");
  c.meta_json = get("meta").toStringRef();
  for (const auto& kv : get("model").toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) fail("model entry is not {name: tensor}");
    c.model.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  }
  const at::Tensor optimizer = get("optimizer").toTensor().contiguous();
  c.optimizer.resize(static_cast<size_t>(optimizer.numel()));
  if (!c.optimizer.empty())
    std::memcpy(c.optimizer.data(), optimizer.data_ptr(), c.optimizer.size());
  const std::string expected = get("checksum").toStringRef();
  const std::string actual = checksum(c);
  if (expected != actual)
    fail("checksum mismatch (stored " + expected + ", computed " + actual +
         "): corrupt checkpoint");
  return c;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path) {
  return checkpoint_from(
      detail::unpickle(read_file(path), path, "checkpoint (truncated or corrupt archive)"), path);
}

NamedTensors load_model_weights(const std::string& path) {
  const c10::IValue value = detail::unpickle(read_file(path), path, "PyTorch archive");
  // A state_dict's entries are tensors; a checkpoint says what it is.
  if (has_format_entry(value)) return checkpoint_from(value, path).model;
  return load_tensor_dict(path);
}

}  // namespace volshard
