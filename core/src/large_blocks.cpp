#include "volshard/core/large_blocks.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <map>
#include <mutex>
#include <new>

#include "volshard/core/limits.h"

namespace volshard {
namespace {

constexpr size_t kSizeClass = size_t{2} << 20;
constexpr size_t kMinPeak = size_t{128} << 20;

size_t size_class(size_t bytes) { return (bytes + kSizeClass - 1) / kSizeClass * kSizeClass; }

// The released blocks, by size and by age; counters. One mutex: a block
// changes hands a few times a volume, not per voxel.
class BlockCache {
 public:
  void* take(size_t bytes) {
    const size_t want = size_class(bytes);
    std::list<Free> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest released block that fits, if not more than 1.25x too big.
      auto it = by_size_.lower_bound(want);
      if (it != by_size_.end() && it->first <= want + want / 4) {
        void* p = it->second->address;
        const size_t got = it->first;
        free_bytes_ -= got;
        by_age_.erase(it->second);
        by_size_.erase(it);
        ++reused_;
        in_use_ += got;
        peak_in_use_ = std::max(peak_in_use_, in_use_);
        sizes_[p] = got;
        return p;
      }
      // A new block, counted as held from now on: room for it first, among
      // the kept ones.
      in_use_ += want;
      peak_in_use_ = std::max(peak_in_use_, in_use_);
      evicted = trim();
    }
    unmap_all(evicted);
    void* p = map_populated(want);
    if (p == nullptr) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        in_use_ -= want;
      }
      throw OutOfMemoryError(bytes);  // the size asked; reads /proc: outside the lock
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++mapped_;
    sizes_[p] = want;
    return p;
  }

  // Takes back a block of ours; false for any other pointer.
  bool give(void* p) noexcept {
    std::list<Free> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto s = sizes_.find(p);
      if (s == sizes_.end()) return false;
      const size_t bytes = s->second;
      sizes_.erase(s);
      in_use_ -= bytes;
      by_age_.push_back({p, bytes});
      by_size_.emplace(bytes, std::prev(by_age_.end()));
      free_bytes_ += bytes;
      evicted = trim();
    }
    unmap_all(evicted);
    return true;
  }

  // Unmaps every released block (outside the lock); returns their bytes.
  int64_t unmap_free() {
    std::list<Free> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      evicted.splice(evicted.end(), by_age_);
      by_size_.clear();
      free_bytes_ = 0;
      unmapped_ += static_cast<int64_t>(evicted.size());
    }
    int64_t bytes = 0;
    for (const Free& f : evicted) bytes += static_cast<int64_t>(f.bytes);
    unmap_all(evicted);
    return bytes;
  }

  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

  LargeBlockStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    LargeBlockStats s;
    s.in_use_bytes = static_cast<int64_t>(in_use_);
    s.free_bytes = static_cast<int64_t>(free_bytes_);
    s.peak_in_use_bytes = static_cast<int64_t>(peak_in_use_);
    s.mapped = mapped_;
    s.reused = reused_;
    s.unmapped = unmapped_;
    return s;
  }

 private:
  struct Free {
    void* address;
    size_t bytes;
  };
  // Takes kept blocks out, longest unused first, until they and the held
  // ones fit in twice the peak held; the caller unmaps them outside the lock.
  std::list<Free> trim() {
    std::list<Free> evicted;
    const size_t cap = 2 * std::max(kMinPeak, peak_in_use_);
    while (in_use_ + free_bytes_ > cap && !by_age_.empty()) {
      const auto oldest = by_age_.begin();
      for (auto it = by_size_.lower_bound(oldest->bytes); it != by_size_.end(); ++it) {
        if (it->second == oldest) {
          by_size_.erase(it);
          break;
        }
      }
      free_bytes_ -= oldest->bytes;
      ++unmapped_;
      evicted.splice(evicted.end(), by_age_, oldest);
    }
    return evicted;
  }

  static void unmap_all(const std::list<Free>& blocks) {
    for (const Free& f : blocks) unmap(f.address, f.bytes);
  }

  std::mutex mutex_;
  std::list<Free> by_age_;  ///< released blocks, oldest first
  std::multimap<size_t, std::list<Free>::iterator> by_size_;
  std::map<void*, size_t> sizes_;  ///< blocks held by callers, by address
  size_t in_use_ = 0, free_bytes_ = 0, peak_in_use_ = 0;
  int64_t mapped_ = 0, reused_ = 0, unmapped_ = 0;
};

// Never destroyed: tensors may release blocks during static destruction.
// Across fork() (a torch DataLoader's workers, while loader threads run) the
// lock is taken first, so the child never inherits it held by a thread it
// does not have.
BlockCache& cache() {
  static BlockCache* c = [] {
    auto* made = new BlockCache;
    const auto lock = [] { cache().lock_for_fork(); };
    const auto unlock = [] { cache().unlock_after_fork(); };
    ::pthread_atfork(lock, unlock, unlock);
    return made;
  }();
  return *c;
}

std::atomic<bool> cache_on{false};

}  // namespace

void* map_populated(size_t bytes, bool written) {
  const size_t length = std::max<size_t>(bytes, 1);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, Linux 5.14 (glibc 2.36 lacks the name)
  (void)::madvise(p, length, kPopulateWrite);
  if (written) std::memset(p, 0, length);
  return p;
}

void unmap(void* p, size_t bytes) noexcept { ::munmap(p, std::max<size_t>(bytes, 1)); }

void* allocate_bytes(size_t bytes) {
  if (bytes >= kLargeBlockBytes && cache_on.load(std::memory_order_relaxed))
    return cache().take(bytes);
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw OutOfMemoryError(bytes);
  return p;
}

bool release_if_cached(void* p) noexcept { return p != nullptr && cache().give(p); }

void release_bytes(void* p, size_t bytes) noexcept {
  // A large block goes back to the cache even if it was turned off since.
  if (bytes >= kLargeBlockBytes && release_if_cached(p)) return;
  std::free(p);
}

void enable_large_block_cache(bool on) { cache_on.store(on); }
bool large_block_cache_enabled() { return cache_on.load(); }
LargeBlockStats large_block_stats() { return cache().stats(); }

int64_t release_free_memory() {
  const int64_t bytes = cache().unmap_free();
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
  return bytes;
}

}  // namespace volshard
