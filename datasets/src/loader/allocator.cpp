#include <c10/core/CPUAllocator.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "volshard/core/large_blocks.h"
#include "volshard/core/limits.h"
#include "volshard/datasets/loader.h"
#include "volshard/datasets/out_of_memory.h"

// The allocation policy for volumes: at::empty's large blocks through the
// large-block cache, glibc in one arena with high thresholds.
namespace volshard {

namespace {

// at::empty's CPU memory: requests of kLargeBlockBytes and more through the
// large-block cache, the rest through the allocator it replaced. Every
// DataPtr's context is its data, as LibTorch's raw_allocate/raw_deallocate
// (convolution workspaces) require: one raw deleter serves both kinds.
// Installed once, by tune_allocator_for_volumes.
class VolumeCpuAllocator final : public c10::Allocator {
 public:
  explicit VolumeCpuAllocator(c10::Allocator* fallback) : fallback_(fallback) {
    fallback_raw_ = fallback->raw_deleter();
  }
  c10::DataPtr allocate(size_t bytes) override {
    if (bytes < kLargeBlockBytes || !large_block_cache_enabled()) {
      try {
        return fallback_->allocate(bytes);
      } catch (const c10::Error& e) {  // as the large blocks' failure: a std::bad_alloc
        if (!is_out_of_memory(e)) throw;
        throw OutOfMemoryError(bytes);
      }
    }
    void* p = allocate_bytes(bytes);
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool usable() const { return fallback_raw_ != nullptr; }

 private:
  static void release(void* p) {
    if (!release_if_cached(p)) fallback_raw_(p);
  }
  c10::Allocator* fallback_;
  static inline c10::DeleterFnPtr fallback_raw_ = nullptr;
};

}  // namespace

bool is_out_of_memory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string& text = e.msg();
  return text.find("DefaultCPUAllocator: ") != std::string::npos &&
         text.find("you tried to allocate ") != std::string::npos;
}

size_t bytes_asked(const c10::Error& e) {
  static const std::string asked = "you tried to allocate ";  // c10's DefaultCPUAllocator
  const std::string& text = e.msg();
  const size_t at = text.find(asked);
  if (at == std::string::npos) return 0;
  return static_cast<size_t>(std::strtoull(text.c_str() + at + asked.size(), nullptr, 10));
}

void rethrow_naming_out_of_memory(const std::string& context, const c10::Error& e) {
  if (!is_out_of_memory(e)) throw;  // the error being handled, as it is
  const size_t bytes = bytes_asked(e);
  if (bytes > 0) throw OutOfMemoryError(context, OutOfMemoryError(bytes));
  throw std::runtime_error(context + ": " + e.what_without_backtrace());
}

bool tune_allocator_for_volumes() {
  static const bool installed = [] {
    static VolumeCpuAllocator allocator(c10::GetCPUAllocator());
    if (!allocator.usable()) return false;  // a replaced allocator without raw_deleter
    enable_large_block_cache();
    c10::SetCPUAllocator(&allocator, /*priority=*/1);
    return true;
  }();
  (void)installed;
#if defined(__GLIBC__)
  // One arena: a batch allocated by a loader worker would otherwise live in
  // that thread's arena, whose 64 MiB heaps glibc unmaps as soon as they
  // empty, trim threshold or not (measured: ~2000 page faults per volume).
  return mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
         mallopt(M_ARENA_MAX, 1) == 1;
#else
  return false;
#endif
}

}  // namespace volshard
