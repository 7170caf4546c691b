#pragma once
// Memory for volumes: blocks of 16 MiB and more, kept in the process for reuse
// once released, instead of glibc's heap or a fresh mmap each time.
//
// Why: a CT volume's load makes buffers of 50-200 MB (compressed file, voxels,
// float image, label) on each loader thread. Below glibc's mmap threshold
// (256 MiB once tune_allocator_for_volumes set it) they come from one heap,
// which two threads' interleaved lifetimes fragment: RSS grew by ~1 GB an
// epoch at 512 x 512 x 200 (bench_pipeline --ct). Above it, each is a fresh
// mapping whose pages fault in on every load. Volumes of a dataset repeat the
// same few sizes, so a released block is nearly always the next load's.

#include <cstddef>
#include <cstdint>

namespace volshard {

/// Requests of at least this many bytes go to the block cache when it is on.
inline constexpr size_t kLargeBlockBytes = size_t{16} << 20;

/// Memory of `bytes` bytes (>= 1), 64-byte aligned, uninitialised (or zero),
/// owned until release_bytes(p, bytes). Large requests with the cache on
/// reuse a released block of the same size class (rounded up to 2 MiB) or up
/// to 1.25x larger, else map a new one with its pages faulted in; the rest
/// come from malloc. Thread-safe. Throws std::bad_alloc.
void* allocate_bytes(size_t bytes);
/// Gives back what allocate_bytes(bytes) returned.
void release_bytes(void* p, size_t bytes) noexcept;
/// Takes `p` back if it is a block the cache handed out and still counts as
/// held (whatever its size); false for any other pointer, left untouched.
bool release_if_cached(void* p) noexcept;

/// Turns the cache on (off: large requests are malloc'd and freed, as
/// before). It keeps released blocks while the large blocks held and kept
/// together stay within twice the most ever held at once (or 256 MiB),
/// unmapping the longest unused first: the process's large memory stays
/// within twice its peak need, and near it when sizes repeat.
void enable_large_block_cache(bool on = true);
bool large_block_cache_enabled();

struct LargeBlockStats {
  int64_t in_use_bytes = 0;  ///< held by callers
  int64_t free_bytes = 0;    ///< released, kept for reuse
  int64_t peak_in_use_bytes = 0;
  int64_t mapped = 0;    ///< blocks mapped since start
  int64_t reused = 0;    ///< requests served by a released block
  int64_t unmapped = 0;  ///< released blocks given back to the kernel
};
LargeBlockStats large_block_stats();

/// Gives the kernel back what is kept for reuse: every released large block
/// and the free top of glibc's heap (malloc_trim). For a phase after which
/// the sizes it used do not come again (a cache fill when everything is
/// cached). Returns the large blocks' bytes unmapped.
int64_t release_free_memory();

/// `bytes` (>= 1) of fresh anonymous memory with every page faulted in by one
/// madvise(MADV_POPULATE_WRITE) call (Linux >= 5.14; elsewhere pages fault in
/// on first use), and with `written` also written once. On this project's VM
/// (Firecracker, free page reporting) a page faulted in one at a time costs
/// ~12 us, populated ~1 us plus ~2 us on its first write. nullptr if mmap fails.
void* map_populated(size_t bytes, bool written = false);
void unmap(void* p, size_t bytes) noexcept;

}  // namespace volshard
