#pragma once
// Upper bounds on what a user can ask for, checked before anything is
// allocated: fixed limits for counts (threads), and this machine's memory for
// sizes, so that a value too large is refused by name ("--roi=100000 needs
// 3.7 TB of memory; this machine has 24 GB") instead of ending in
// std::bad_alloc. Std only.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
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

/// Memory a new allocation can have now, in bytes: /proc/meminfo's
/// MemAvailable, lowered to the room left under a cgroup (v2) memory.max.
/// 0 when unknown.
int64_t available_memory_bytes();

/// The std::bad_alloc of a request that passed the up-front checks but found
/// no memory: what() says the size asked and what there was ("could not
/// allocate 2.0 GB (2048000000 bytes): 1.1 GB of this machine's 24 GB
/// available, the process limited to 8.0 GB of address space (ulimit -v)").
/// A caller that knows the file or the step catches std::bad_alloc and throws
/// OutOfMemoryError(context, e): still a std::bad_alloc (Python's
/// MemoryError), its text "<context>: <e's>". Copies share the text.
class OutOfMemoryError : public std::bad_alloc {
 public:
  explicit OutOfMemoryError(size_t bytes);
  OutOfMemoryError(const std::string& context, const std::bad_alloc& inner);
  const char* what() const noexcept override { return text_->c_str(); }
  size_t bytes() const noexcept { return bytes_; }  ///< 0: not known (a plain std::bad_alloc)

 private:
  size_t bytes_ = 0;
  std::shared_ptr<const std::string> text_;
};

}  // namespace volshard
