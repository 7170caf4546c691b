#pragma once
// A batch's rows and the buffers a DataLoader recycles for them (loader.cpp's
// workers write crops straight into these rows; collate makes the same batch
// in one go). Private to datasets/src/loader.

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "volshard/core/parallel.h"
#include "volshard/datasets/loader.h"

namespace volshard::detail {

// The shapes of a batch of n rows shaped as `first`, and the label's dtype.
struct RowShapes {
  std::vector<int64_t> image, label;
  at::ScalarType label_dtype;
};
RowShapes row_shapes(const Sample& first, int64_t n, std::optional<at::ScalarType> label_dtype);

// A pooled batch buffer holds the image rows, then the label rows from the
// next multiple of 64 bytes.
size_t label_offset_of(const RowShapes& r, const Sample& first);
size_t buffer_bytes(const RowShapes& r, const Sample& first);

// Uninitialised batch tensors of n rows shaped (and typed) as `first`, the
// label typed label_dtype when given; pinned: in page-locked memory, which
// the workers then write the crops into directly (no second copy to pin).
void allocate_rows(const Sample& first, int64_t n, std::optional<at::ScalarType> label_dtype,
                   bool pinned, at::Tensor& image, at::Tensor& label);

// A contiguous tensor of `shape` over `storage` from byte `offset` (a multiple
// of the dtype's size).
at::Tensor tensor_over(const c10::Storage& storage, size_t offset,
                       const std::vector<int64_t>& shape, at::TensorOptions options);

// Whether s goes into these rows: same shapes and image dtype; the label's
// dtype too unless labels are converted to label_dtype.
bool fits(const Sample& s, const at::Tensor& image_rows, const at::Tensor& label_rows,
          std::optional<at::ScalarType> label_dtype);

// "image 1x32x32x32 Float, label 1x32x32x32 Byte": what a sample brings to
// a batch.
std::string rows_text(const Sample& s);

// `bytes` of zero-filled memory, its pages already faulted in (map_populated;
// `written`: written once too, for reserve()), owned by the returned storage
// (unmapped when the last reference goes).
c10::Storage prefaulted_storage(size_t bytes, bool written = false);

// The batch buffers a loader recycles: one byte buffer per batch holds its
// image and label rows. A buffer is free again once the pool holds the only
// reference to it, that is once the consumer has dropped the Batch and every
// view of it, and no worker of an abandoned epoch still writes into it.
// Without it, every batch is a fresh malloc of up to hundreds of MB, which at
// 256^3 (2 x 4 crops of 192^3: 453 MB a batch) grew the heap for several
// epochs: 6.6 GB peak for a 1.3 GB cache, 600k minor faults an epoch. At most
// `capacity` buffers are kept: the batches in flight (prefetch_batches), the
// one handed out, and the one a consumer still holds while asking for the
// next; a batch beyond that (a consumer keeping more) gets memory of its own.
//
// Its buffers come from mmap with every page faulted in by one
// madvise(MADV_POPULATE_WRITE) call: on this VM a first touch page by page
// costs ~15 us a page (4 s a GB, measured), one populate call ~1 s a GB, so
// the first epoch no longer pays most of its time faulting in batch memory.
// Where the kernel lacks MADV_POPULATE_WRITE (before 5.14), the pages fault
// in as they are written, as before.
class BatchPool {
 public:
  explicit BatchPool(size_t capacity) : capacity_(capacity) {}

  // Fills the pool up to its capacity with buffers of `bytes`, faulted in and
  // written on up to `threads` threads at once; returns the bytes the pool
  // then holds in buffers of at least `bytes`. The buffers are made outside
  // `mutex` (the loader's) and added under it.
  size_t reserve(size_t bytes, int64_t threads, std::mutex& mutex) {
    size_t missing = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      size_t fitting = 0;
      for (const c10::Storage& b : buffers_) fitting += b.nbytes() >= bytes ? 1 : 0;
      missing = capacity_ - fitting;
    }
    std::vector<c10::Storage> fresh(missing);
    parallel_items(static_cast<int64_t>(missing), threads, [&](int64_t k) {
      fresh[static_cast<size_t>(k)] = prefaulted_storage(bytes, true);
      return true;
    });
    std::lock_guard<std::mutex> lock(mutex);
    for (c10::Storage& b : fresh) keep(std::move(b));
    size_t held = 0;
    for (const c10::Storage& b : buffers_) held += b.nbytes() >= bytes ? b.nbytes() : 0;
    return held;
  }

  // A buffer of at least `bytes` bytes that nobody else holds: the smallest
  // free one that fits, else a new one (kept, see keep()). Called under the
  // loader's mutex.
  c10::Storage acquire(size_t bytes) {
    c10::Storage* best = nullptr;
    for (c10::Storage& b : buffers_) {
      if (b.use_count() == 1 && b.nbytes() >= bytes && (!best || b.nbytes() < best->nbytes()))
        best = &b;
    }
    if (best) return *best;
    c10::Storage fresh = prefaulted_storage(bytes);
    keep(fresh);
    return fresh;
  }

 private:
  // Keeps a new buffer beside the others while there is room, else in place
  // of a free one smaller than it; else not at all (it is freed once its
  // batch is dropped). Called under the loader's mutex.
  void keep(c10::Storage fresh) {
    if (buffers_.size() < capacity_) {
      buffers_.push_back(std::move(fresh));
      return;
    }
    const auto small = std::find_if(buffers_.begin(), buffers_.end(), [&](const c10::Storage& b) {
      return b.use_count() == 1 && b.nbytes() < fresh.nbytes();
    });
    if (small != buffers_.end()) *small = std::move(fresh);
  }

  size_t capacity_;
  std::vector<c10::Storage> buffers_;
};

}  // namespace volshard::detail
