#pragma once
// XXH64 (xxHash's 64-bit hash, written here from its specification) over
// buffers and whole files: what the persistent cache keys its entries by and
// checks them with. Standard library only.

#include <cstddef>
#include <cstdint>
#include <string>

namespace volshard {

/// Streaming XXH64: update() any number of times, then digest(). The result
/// is xxHash's XXH64 of the concatenated bytes (the same on every platform),
/// whatever the split into updates.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  uint64_t digest() const;  ///< does not change the state; update() may continue

 private:
  uint64_t acc_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  unsigned char buffer_[32];
  size_t buffered_ = 0;
};

/// XXH64 of one buffer (xxhsum -H1 of the same bytes).
uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

/// A file's size and the XXH64 of its bytes.
struct FileDigest {
  uint64_t size_bytes = 0;
  uint64_t xxh64 = 0;
  bool operator==(const FileDigest& other) const {
    return size_bytes == other.size_bytes && xxh64 == other.xxh64;
  }
};

/// Reads the file in 1 MiB blocks (about 2 ms for a 7 MB .nii.gz in the page
/// cache). Throws std::runtime_error naming the path if it cannot be opened
/// or read. Thread-safe.
FileDigest digest_file(const std::string& path);

}  // namespace volshard
