#pragma once
// MONAI's CacheDataset for volshard: the deterministic prefix of the pipeline
// (load, channel-first, scale intensity, and the label's foreground/background
// indices the crops need) computed once, in parallel, under a byte budget.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "volshard/transforms/loader.h"

namespace volshard {

struct CacheOptions {
  double cache_rate = 1.0;  ///< fraction of the dataset to keep, in [0, 1] (the first items)
  int64_t max_bytes = -1;   ///< stop caching once this many bytes are held; -1: no limit
  int64_t threads = 2;      ///< fill with this many threads, >= 1
  bool progress = false;    ///< a progress bar on stderr while filling
  void validate() const;    ///< throws std::invalid_argument naming the value
};

/// Holds prepared samples. The random transforms never write into their input
/// (crops, rotations and flips make new tensors), so get() shares the cached
/// tensors instead of deep-copying them as MONAI must.
class SampleCache {
 public:
  /// Prepares items [0, size) with `prepare` until the rate or byte budget is
  /// reached; items beyond it are prepared on every get().
  SampleCache(SampleSource prepare, int64_t size, CacheOptions options);
  /// The prepared item; thread-safe.
  Sample get(int64_t index) const;
  int64_t size() const { return size_; }
  int64_t cached_items() const;
  int64_t cached_bytes() const { return bytes_; }
  /// A SampleSource view of this cache for a DataLoader (the cache must outlive it).
  SampleSource source() const;

 private:
  SampleSource prepare_;
  int64_t size_;
  std::vector<std::optional<Sample>> items_;
  int64_t bytes_ = 0;
};

/// Bytes a prepared sample holds (tensors and indices).
int64_t sample_bytes(const Sample& sample);

}  // namespace volshard
