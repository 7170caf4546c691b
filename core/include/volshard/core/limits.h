#pragma once
// Upper bounds on what a user can ask for, checked before anything is
// allocated: fixed limits for counts (threads), and this machine's memory for
// sizes, so that a value too large is refused by name ("--roi=100000 needs
// 3.7 TB of memory; this machine has 24 GB") instead of ending in
// std::bad_alloc. Std only.

#include <cstdint>
#include <string>

namespace volshard {

/// Loader and cache threads per rank, and intra-op threads: at most this many.
inline constexpr int64_t kMaxThreads = 256;

/// This machine's physical memory in bytes (/proc/meminfo MemTotal); the
/// environment variable VOLSHARD_MEMORY_BYTES overrides it (tests). 0 when unknown.
int64_t physical_memory_bytes();

/// "3.7 TB", "512 MB", "24 GB": decimal units, two significant digits at most.
std::string bytes_text(double bytes);

/// Throws std::invalid_argument "<what> needs <bytes_text(bytes)> of memory;
/// this machine has <memory>" when `bytes` exceeds physical memory (nothing
/// when memory is unknown). `bytes` is a double so that products of large
/// values cannot overflow before they are compared.
void check_fits_in_memory(double bytes, const std::string& what);

}  // namespace volshard
