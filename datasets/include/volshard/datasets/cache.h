#pragma once
// MONAI's CacheDataset for volshard: the deterministic prefix of the pipeline
// (load, channel-first, scale intensity, and the label's foreground/background
// indices the crops need) computed once, in parallel, under a byte budget;
// and, with a cache_dir, MONAI's PersistentDataset: each prepared item is
// also written to disk and the next run loads it instead of preparing it.

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/datasets/loader.h"

namespace volshard {

/// The files item `index` is prepared from (e.g. its image and label).
using ItemFiles = std::function<std::vector<std::string>(int64_t index)>;

/// item_files for a folder or datalist dataset: {pairs[i].image, pairs[i].label}.
ItemFiles files_of(std::vector<ImageLabelPair> pairs);

struct CacheOptions {
  double cache_rate = 1.0;  ///< fraction of the dataset to keep, in [0, 1] (the first items)
  /// Keep the first items whose bytes fit in this many; -1: no limit. The
  /// same items at any thread count (the fill may prepare up to `threads`
  /// items past them, and lets them go when it ends).
  int64_t max_bytes = -1;
  int64_t threads = 2;  ///< fill with this many threads, >= 1
  bool progress =
      false;  ///< progress on stderr while filling: a bar on a TTY, else timestamped lines

  /// Folder of the persistent entries (created if missing); empty: memory only.
  /// Must be writable: the constructor throws std::runtime_error naming it
  /// otherwise. Entries are never deleted: clear the folder by hand.
  std::string cache_dir;
  /// Describes what `prepare` computes (transforms, their parameters, a code
  /// version), e.g. "scale_intensity(0,1) label_indices v1". Part of every
  /// entry's key: change it whenever prepare's output would change, or old
  /// entries are used (the cache cannot see inside prepare).
  std::string config_key;
  /// Required with cache_dir: the files item i is prepared from, e.g.
  /// files_of(pairs). Their contents (XXH64) and config_key form the key, so
  /// editing a file, or the config, makes the item's entry be rebuilt; moving
  /// the dataset does not. Called from the fill threads concurrently.
  ItemFiles item_files;
  /// Where the cached items' tensors live (MONAI's CacheDataset followed by
  /// ToDeviced): nullopt, host memory; a GPU, that device's memory, prepared
  /// (or loaded) on the host and moved there once. max_bytes then counts that
  /// memory. Items past the budget are prepared on every get(), on the host.
  std::optional<c10::Device> device;

  void validate() const;  ///< throws std::invalid_argument naming the value
};

/// Holds prepared samples. The random transforms never write into their input
/// (crops, rotations and flips make new tensors), so get() shares the cached
/// tensors instead of deep-copying them as MONAI must.
///
/// Persistence (cache_dir set): wherever an item would be prepared, its entry
/// `<cache_dir>/<key as 16 hex digits>.vscache` is read instead if it exists
/// and is valid; otherwise the item is prepared and the entry written
/// atomically (temporary file, then rename), so concurrent writers, other
/// processes included, never expose a partial entry. An entry that is
/// truncated, corrupt (magic, version, sizes, or an XXH64 checksum over any
/// byte differs) or written for other contents is never used: a warning
/// through volshard::warn names it, and the item is prepared and the entry
/// rewritten. An entry that cannot be written is a warning too (the item stays
/// in memory). Entries keep every SampleMeta field, tensors (dtype, shape,
/// bytes) and the label indices, so a loaded sample equals the prepared one
/// bit for bit; meta.index and meta.source follow the item that reads the
/// entry when they named the item that wrote it.
class SampleCache {
 public:
  /// Prepares (or loads) items [0, size) until the rate or byte budget is
  /// reached; items beyond it are prepared (or loaded) on every get(), which
  /// with a cache_dir first hashes their files (~2 ms per 7 MB).
  /// Throws std::invalid_argument for bad options, std::runtime_error naming
  /// cache_dir if it cannot be created or written, and rethrows the first
  /// error of prepare or item_files.
  SampleCache(SampleSource prepare, int64_t size, CacheOptions options);
  /// The prepared item; thread-safe.
  Sample get(int64_t index) const;
  int64_t size() const { return size_; }
  int64_t cached_items() const;
  int64_t cached_bytes() const { return bytes_; }
  /// A SampleSource view of this cache for a DataLoader (the cache must outlive it).
  SampleSource source() const;

  /// Items read from cache_dir instead of prepared, since construction (get() included).
  int64_t loaded_from_disk() const;
  /// Calls of prepare since construction (get() included).
  int64_t prepared() const;
  /// Entries found but refused (truncated, corrupt, other contents) and rebuilt.
  int64_t rejected_entries() const;
  /// Where item `index`'s entry is, or would be, for its files' current
  /// contents (hashes them). Throws std::logic_error without a cache_dir,
  /// std::out_of_range for a bad index.
  std::string entry_path(int64_t index) const;

 private:
  struct Counters;
  Sample load_or_prepare(int64_t index) const;

  SampleSource prepare_;
  int64_t size_;
  CacheOptions options_;
  std::vector<std::optional<Sample>> items_;
  int64_t bytes_ = 0;
  std::shared_ptr<Counters> counters_;
};

/// Bytes a prepared sample holds (tensors and indices).
int64_t sample_bytes(const Sample& sample);

}  // namespace volshard
