// libFuzzer target over core's torch.save reader (read_torch_archive: zip,
// CRC-32, the whitelisted pickle machine, tensor views), which every model and
// checkpoint file volshard reads goes through. Built by clang with
// -fsanitize=fuzzer,address,undefined (tests/CMakeLists.txt); ctest runs it for
// 30 s from tests/fuzz/archive_corpus (made by make_archive_corpus.py: real
// torch.save files, the crashing inputs of issue 26 and the costly ones of
// issue 43 item 17). Longer:
//   build/bin/torch_archive_fuzzer build/tests/archive-fuzz-corpus tests/fuzz/archive_corpus \
//     -max_total_time=3600 -jobs=2
// Properties: bad input only ever throws std::runtime_error (no crash, no
// allocation beyond the limits), and every tensor view that is accepted lies
// inside its storage (each element's first byte is read: ASan would see one
// outside) and holds no more elements than it.

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "volshard/core/torch_archive.h"

namespace {

uint64_t touch(const volshard::TorchValue& v) {
  using Kind = volshard::TorchValue::Kind;
  uint64_t sum = 0;
  if (v.kind == Kind::kTensor) {
    const auto& t = *v.tensor;
    int64_t numel = 1;
    for (const int64_t s : t.sizes) numel *= s;
    if (numel > t.storage_numel) __builtin_trap();  // the reader bounds a view by its storage
    // Walk the view in index order, at most 4096 elements (the views are bounded by the limits).
    std::vector<int64_t> index(t.sizes.size(), 0);
    for (int64_t n = 0; n < numel && n < 4096; ++n) {
      int64_t at = t.storage_offset;
      for (size_t d = 0; d < index.size(); ++d) at += index[d] * t.strides[d];
      sum += (*t.storage)[static_cast<size_t>(at * t.element_size)];
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < t.sizes[d]) break;
        index[d] = 0;
      }
    }
  }
  for (const auto& item : v.items) sum += touch(item);
  for (const auto& [key, value] : v.entries) sum += touch(key) + touch(value);
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volshard::TorchArchiveLimits limits;
  limits.max_objects = int64_t{1} << 16;  // keeps every input's memory and time small
  limits.max_pickle_bytes = int64_t{1} << 20;
  limits.value_bytes_allowance = int64_t{1} << 20;
  try {
    const volshard::TorchValue v = volshard::read_torch_archive(data, size, "fuzz.pt", limits);
    volatile uint64_t sink = touch(v);
    (void)sink;
  } catch (const std::runtime_error&) {
    return 0;  // the documented way to refuse input
  }
  return 0;
}
