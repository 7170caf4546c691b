#pragma once
// A data loader for one rank: the rank's indices for an epoch go through a
// source (load or cache) and a Compose on K worker threads, with bounded
// prefetch, and come out as collated batches. Batches do not depend on K.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "volshard/transforms/sample.h"
#include "volshard/transforms/transforms.h"

namespace volshard {

/// Sets up this process's memory for volumes; call once at start-up of a
/// program that runs a loader, before it starts threads. Returns false where
/// mallopt is unavailable (the block cache is on regardless).
/// - glibc malloc keeps multi-MB buffers instead of returning them to the
///   kernel after every crop (mmap threshold 256 MiB, trim threshold 1 GiB),
///   in one arena: without it a quarter of a CPU step went to page faults
///   (docs/platform.md). Same as GLIBC_TUNABLES=glibc.malloc.mmap_threshold=
///   268435456:glibc.malloc.trim_threshold=1073741824:glibc.malloc.arena_max=1.
/// - Buffers of 16 MiB and more (at::empty on CPU, and the NIfTI reader's)
///   come from the large-block cache (volshard/core/large_blocks.h): reused
///   by size instead of fragmenting that one heap, which at CT size grew RSS
///   by ~1 GB an epoch. This installs a CPU allocator for all of LibTorch in
///   the process (c10::SetCPUAllocator), which hands requests under 16 MiB to
///   the one it replaces.
/// (Batch buffers do not rely on either: the loader recycles them itself,
/// see Batch.)
bool tune_allocator_for_volumes();

/// Returns dataset item `index`, ready for the random transforms (loaded and
/// scaled, or a copy from a cache). Called from worker threads concurrently.
using SampleSource = std::function<Sample(int64_t index)>;

/// Whether batches live in page-locked (pinned) host memory, from which a
/// GPU copies asynchronously (`tensor.to(device, non_blocking)`), as PyTorch's
/// DataLoader(pin_memory=True).
enum class PinMemory {
  kAuto,  ///< pinned when this LibTorch has CUDA and sees a GPU (at::hasCUDA()), else pageable
  kOff,   ///< pageable
  kOn,    ///< pinned; without CUDA, validate() refuses it
};

struct LoaderOptions {
  int64_t batch_size = 2;        ///< volumes per batch, >= 1
  bool drop_last_batch = false;  ///< drop a short last batch
  int64_t workers = 2;           ///< 0: transforms run in next() on the caller's thread
  int64_t prefetch_batches = 2;  ///< batches prepared ahead of the consumer, >= 1
  uint64_t seed = 0;  ///< base seed; sample i of epoch e uses SeedStreams(seed).sample_seed(i, e)
  /// The batches' label dtype: float32, as MONAI's, whatever the samples
  /// hold (a compact uint8 label is widened as it is copied in). nullopt:
  /// the first sample's, as the image's always is.
  std::optional<at::ScalarType> label_dtype = at::kFloat;
  PinMemory pin_memory = PinMemory::kAuto;
  /// Where the augmentation runs and the batches are made. nullopt: host
  /// memory, with the host kernels, into recycled (or pinned) buffers. A
  /// device: each sample moved there first (nothing moves when the cache
  /// holds it there: SampleCache's CacheOptions::device), then crops, turns,
  /// flips and intensity changes run there as tensor ops (Gather::kTensorOps)
  /// into batches allocated there, as MONAI's fast-training recipe does on a
  /// GPU. The same draws from the same seeds: the batches equal the host
  /// path's bit for bit on the CPU, where this runs the GPU path's code.
  std::optional<c10::Device> device;
  void validate() const;  ///< throws std::invalid_argument naming the value
};

/// num_samples crops of each of batch_size volumes, flattened in order (volume
/// by volume, then patch), as MONAI's list_data_collate: image and label are
/// (volumes * crops) x C x X x Y x Z.
///
/// A DataLoader's batches live in buffers it recycles (pageable batches; pinned
/// ones come from CUDA's host allocator, which recycles them): at most
/// prefetch_batches + 2 buffers, one batch's image and label each, so memory
/// stays flat over epochs. A buffer is written again only once the consumer
/// has dropped every tensor and view of its batch: holding a Batch (or a view
/// of it) keeps it intact, with no copy needed; a consumer holding more batches
/// than that makes the loader allocate fresh ones for the rest.
struct Batch {
  int64_t step = 0;
  at::Tensor image;
  at::Tensor label;
  std::vector<SampleMeta> meta;  ///< one per row of image/label
  double wait_seconds = 0;       ///< how long next() blocked for this batch
};

/// Stacks samples into a Batch (image dtype of sample 0; label dtype
/// label_dtype, or sample 0's), applying pending views (Compose::lazy) on the
/// way, so each crop is copied once (`how`: see Gather); throws std::invalid_argument naming the
/// first sample whose shape or dtype differs. `pinned`: the batch's tensors
/// in pinned host memory (needs CUDA).
Batch collate(std::vector<Sample> samples, std::optional<at::ScalarType> label_dtype = std::nullopt,
              bool pinned = false, Gather how = Gather::kAuto);

class DataLoader {
 public:
  DataLoader(SampleSource source, Compose transforms, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts an epoch over these indices (e.g. sampler.iterate()), dropping
  /// whatever the previous epoch had in flight.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch);
  /// Batches of the current epoch in order; nullopt at its end. Rethrows,
  /// for the batch that holds it, the exception a worker hit (naming the
  /// dataset index).
  std::optional<Batch> next();
  /// Makes the first epoch run as fast as the next ones: faults in now the
  /// prefetch_batches + 2 batch buffers the loader recycles (sized for a full
  /// batch of item `index`'s crops, which are produced lazily to learn their
  /// shapes: from a cache nothing is copied; from files, the item is loaded
  /// once), on up to `workers` threads. Without it, the first epoch faults
  /// them in as it fills them: on this project's VM ~0.8 s a GB, more than a
  /// whole epoch takes at 256^3. Returns the bytes the pool holds for such
  /// batches (0 for pinned batches, which CUDA's host allocator keeps, and
  /// when the item fails: next() raises that for its batch, as without it).
  /// Optional, and any time: batches are the same with or without it. Batches
  /// made on a device have no pool (0).
  int64_t reserve(int64_t index = 0);
  /// Steps of the current epoch.
  int64_t num_batches() const;
  const LoaderOptions& options() const;
  /// Whether this loader's batches are pinned (pin_memory, kAuto resolved).
  bool pinned() const;

 private:
  struct Impl;  // worker threads, locks and batches in flight (loader.cpp)
  std::unique_ptr<Impl> impl_;
};

}  // namespace volshard
