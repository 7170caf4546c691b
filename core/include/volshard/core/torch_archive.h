#pragma once
// torch.save's zip archives (PyTorch >= 1.6, LibTorch's pickle_save, and
// volshard's model.pt and checkpoint.pt), read without executing anything and
// with every size checked before it is used. Standard library only (zlib for
// CRC-32), so the reader is fuzzed on its own (tests/fuzz/torch_archive_fuzzer.cpp).
//
// What it accepts is what a state_dict or a volshard checkpoint holds: None,
// bools, ints, floats, strings, bytes, lists, tuples, dicts (OrderedDict
// included) and tensors whose storages are records of the archive. Pickle
// opcodes and globals come from a whitelist (torch.load(weights_only=True)
// allows no more for these files); anything else is refused by name.
//
// What a file may cost. A file of N bytes whose data.pkl has P bytes makes
// the reader:
//   - hash at most N bytes: zip records may not overlap (torch.save's never
//     do), so no byte is checked twice however many names the directory holds;
//   - copy each tensor storage once, at most N bytes in all: tensors sharing a
//     storage share one copy (trainer's tensor_of keeps that: one at::Tensor
//     per storage, the tensors views of it);
//   - make at most max_objects parse nodes, one per pickle opcode (a few
//     hundred bytes each);
//   - hand back values taking at most P * value_bytes_per_pickle_byte +
//     value_bytes_allowance bytes in memory (a value's struct and its string's
//     bytes), a value shared by many references counted at each.
// A tensor's view lies inside its storage and holds at most as many elements
// as it: a zero or overlapping stride that would repeat more is refused, so
// materialising any view (a clone, a checksum) costs at most its storage's bytes.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace volshard {

/// Upper bounds checked before anything is allocated; a file beyond one is
/// refused naming the bound.
struct TorchArchiveLimits {
  int64_t max_pickle_bytes = int64_t{256} << 20;  ///< data.pkl
  int64_t max_records = int64_t{1} << 20;         ///< entries of the zip's directory
  int64_t max_objects = int64_t{1} << 22;         ///< values made while unpickling and converting
  int64_t max_depth = 64;                         ///< containers nested in containers
  int64_t max_dims = 64;                          ///< a tensor's dimensions
  /// Bytes the values handed back may take, per byte of data.pkl (a pickle
  /// writes a value in 1 byte or more; its struct takes sizeof(TorchValue)).
  int64_t value_bytes_per_pickle_byte = 128;
  int64_t value_bytes_allowance = int64_t{16} << 20;  ///< bytes, besides
};

/// A tensor as the archive stores it: a view (sizes, strides, offset, in
/// elements) of a storage whose bytes are a record of the archive. The view
/// lies inside the storage (checked).
struct TorchTensorRecord {
  std::string dtype;  ///< torch's name: float32, float64, float16, bfloat16, int64, int32, int16,
                      ///< int8, uint8, bool
  int64_t element_size = 0;  ///< bytes
  std::vector<int64_t> sizes, strides;
  int64_t storage_offset = 0;
  int64_t storage_numel = 0;
  /// storage_numel * element_size bytes, shared by the tensors that share the storage.
  std::shared_ptr<const std::vector<uint8_t>> storage;
};

struct TorchValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kDict, kTensor };
  Kind kind = Kind::kNone;
  int64_t i = 0;                                           ///< kBool (0 or 1), kInt
  double f = 0;                                            ///< kFloat
  std::string s;                                           ///< kString, kBytes
  std::vector<TorchValue> items;                           ///< kList, kTuple
  std::vector<std::pair<TorchValue, TorchValue>> entries;  ///< kDict, in the file's order
  std::shared_ptr<const TorchTensorRecord> tensor;         ///< kTensor

  /// The entry of a dict with this string key, or nullptr.
  const TorchValue* find(const std::string& key) const;
  /// "dict", "tensor", ...: for messages.
  const char* kind_name() const;
};

/// Parses `size` bytes of a torch.save archive. Every record's CRC-32 is
/// checked (a flipped bit anywhere is refused), records must be stored
/// uncompressed (as torch.save writes them: a compressed one, such as a zip
/// bomb's, is refused) and may not overlap, and every offset, size, count,
/// depth and view is checked against the file and `limits` (the costs above).
/// Throws std::runtime_error "<what>: <reason>".
TorchValue read_torch_archive(const uint8_t* data, size_t size, const std::string& what,
                              const TorchArchiveLimits& limits = {});

/// The record volshard's writer adds beside data.pkl: one line per data
/// record, "<name> <crc32 hex> <bytes>". The zip keeps each record's CRC with
/// its name, so two records of one size whose names were swapped pass their
/// own checks; this list ties each name to its bytes, and
/// read_torch_archive refuses a file that disagrees with it. torch.load
/// ignores it; files without it (torch.save's) are read as before.
inline constexpr const char* kRecordManifest = "volshard_records";

/// zlib's CRC-32 of `size` bytes (any size; zlib takes at most 4 GiB a
/// call), continuing `crc` (0: a fresh one): crc32(crc32(a), b) = crc32(ab).
uint32_t archive_crc32(const void* data, size_t size, uint32_t crc = 0);

/// read_torch_archive of a file's bytes; errors name the path.
TorchValue read_torch_archive_file(const std::string& path, const TorchArchiveLimits& limits = {});

}  // namespace volshard
