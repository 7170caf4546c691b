#include "volshard/datasets/loader.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/Storage.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "volshard/core/error.h"
#include "volshard/core/large_blocks.h"
#include "volshard/core/limits.h"
#include "volshard/core/parallel.h"
#include "volshard/core/seed_streams.h"

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
    if (bytes < kLargeBlockBytes || !large_block_cache_enabled()) return fallback_->allocate(bytes);
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

void LoaderOptions::validate() const {
  if (batch_size < 1)
    throw std::invalid_argument("DataLoader: batch_size=" + std::to_string(batch_size) +
                                " must be >= 1");
  if (workers < 0 || workers > kMaxThreads)
    throw std::invalid_argument("DataLoader: workers=" + std::to_string(workers) + " must be in [0, " +
                                std::to_string(kMaxThreads) + "]");
  if (prefetch_batches < 1 || prefetch_batches > 64) {
    throw std::invalid_argument("DataLoader: prefetch_batches=" + std::to_string(prefetch_batches) +
                                " must be in [1, 64]");
  }
  if (pin_memory == PinMemory::kOn && device) {
    throw std::invalid_argument("DataLoader: pin_memory=on with device=" + device->str() +
                                ": batches made on a device are not in host memory; use auto");
  }
  if (pin_memory == PinMemory::kOn && !at::hasCUDA()) {
    throw std::invalid_argument(
        "DataLoader: pin_memory=on needs a CUDA build of LibTorch and a visible GPU (at::hasCUDA() "
        "is false); "
        "use auto or off");
  }
}

namespace {

// The row shape a sample takes in a batch: C x its (view's) spatial shape.
std::vector<int64_t> row_shape(const at::Tensor& t, const std::array<int64_t, 3>& spatial) {
  return {t.size(0), spatial[0], spatial[1], spatial[2]};
}

// The shapes of a batch of n rows shaped as `first`, and the label's dtype.
struct RowShapes {
  std::vector<int64_t> image, label;
  at::ScalarType label_dtype;
};

RowShapes row_shapes(const Sample& first, int64_t n, std::optional<at::ScalarType> label_dtype) {
  const auto spatial = view_shape(first);
  RowShapes r{{n}, {n}, label_dtype.value_or(first.label.scalar_type())};
  for (int64_t d : row_shape(first.image, spatial)) r.image.push_back(d);
  for (int64_t d : row_shape(first.label, spatial)) r.label.push_back(d);
  return r;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A pooled batch buffer holds the image rows, then the label rows from the
// next multiple of 64 bytes.
size_t label_offset_of(const RowShapes& r, const Sample& first) {
  const auto image_bytes = static_cast<size_t>(numel(r.image)) * first.image.element_size();
  return (image_bytes + 63) / 64 * 64;
}

size_t buffer_bytes(const RowShapes& r, const Sample& first) {
  return label_offset_of(r, first) +
         static_cast<size_t>(numel(r.label)) * c10::elementSize(r.label_dtype);
}

// Uninitialised batch tensors of n rows shaped (and typed) as `first`, the
// label typed label_dtype when given; pinned: in page-locked memory, which
// the workers then write the crops into directly (no second copy to pin).
void allocate_rows(const Sample& first, int64_t n, std::optional<at::ScalarType> label_dtype,
                   bool pinned, at::Tensor& image, at::Tensor& label) {
  const RowShapes r = row_shapes(first, n, label_dtype);
  check_fits_in_memory(static_cast<double>(buffer_bytes(r, first)),
                       "DataLoader: a batch of " + std::to_string(n) + " crops of " +
                           shape_text(r.image.data() + 1, r.image.size() - 1) +
                           " (batch_size x num_samples rows)");
  image = at::empty(r.image, first.image.options().pinned_memory(pinned));
  label = at::empty(r.label, first.label.options().dtype(r.label_dtype).pinned_memory(pinned));
}

// A contiguous tensor of `shape` over `storage` from byte `offset` (a multiple
// of the dtype's size).
at::Tensor tensor_over(const c10::Storage& storage, size_t offset,
                       const std::vector<int64_t>& shape, at::TensorOptions options) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  const auto itemsize = static_cast<size_t>(c10::elementSize(options.dtype().toScalarType()));
  return at::empty({0}, options)
      .set_(storage, static_cast<int64_t>(offset / itemsize), shape, strides);
}

// Whether s goes into these rows: same shapes and image dtype; the label's
// dtype too unless labels are converted to label_dtype.
bool fits(const Sample& s, const at::Tensor& image_rows, const at::Tensor& label_rows,
          std::optional<at::ScalarType> label_dtype) {
  const auto spatial = view_shape(s);
  return image_rows.sizes().slice(1) == at::IntArrayRef(row_shape(s.image, spatial)) &&
         label_rows.sizes().slice(1) == at::IntArrayRef(row_shape(s.label, spatial)) &&
         s.image.scalar_type() == image_rows.scalar_type() &&
         (label_dtype || s.label.scalar_type() == label_rows.scalar_type());
}

// `bytes` of zero-filled memory, its pages already faulted in (map_populated;
// `written`: written once too, for reserve()), owned by the returned storage
// (unmapped when the last reference goes).
c10::Storage prefaulted_storage(size_t bytes, bool written = false) {
  struct Mapping {
    void* address;
    size_t bytes;
  };
  void* p = map_populated(bytes, written);
  if (p == nullptr) return at::empty({static_cast<int64_t>(bytes)}, at::kByte).storage();
  auto* mapping = new Mapping{p, bytes};
  const auto release = [](void* ctx) {
    auto* m = static_cast<Mapping*>(ctx);
    unmap(m->address, m->bytes);
    delete m;
  };
  return c10::Storage(c10::Storage::use_byte_size_t(), bytes,
                      c10::DataPtr(p, mapping, release, c10::Device(c10::kCPU)), nullptr, false);
}

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

// "image 1x32x32x32 Float, label 1x32x32x32 Byte": what a sample brings to
// a batch.
std::string rows_text(const Sample& s) {
  const auto spatial = view_shape(s);
  return "image " + shape_text(row_shape(s.image, spatial)) + " " +
         std::string(c10::toString(s.image.scalar_type())) + ", label " +
         shape_text(row_shape(s.label, spatial)) + " " + c10::toString(s.label.scalar_type());
}

}  // namespace

Batch collate(std::vector<Sample> samples, std::optional<at::ScalarType> label_dtype, bool pinned,
              Gather how) {
  Batch batch;
  if (samples.empty()) return batch;
  allocate_rows(samples[0], static_cast<int64_t>(samples.size()), label_dtype, pinned, batch.image,
                batch.label);
  for (size_t k = 0; k < samples.size(); ++k) {
    if (!fits(samples[k], batch.image, batch.label, label_dtype)) {
      // As MONAI's list_data_collate, crops are stacked, not padded: a crop
      // that allow_smaller shrank to a smaller volume does not stack.
      throw std::invalid_argument(
          "collate: sample " + std::to_string(k) + " (dataset index " +
          std::to_string(samples[k].meta.index) + ": " + rows_text(samples[k]) +
          ") has another shape or dtype than sample 0 (dataset index " +
          std::to_string(samples[0].meta.index) + ": " + rows_text(samples[0]) +
          "); a batch stacks equal crops: with --allow-smaller use a --crop that fits every "
          "volume, or --batch-size 1 with --num-samples 1");
    }
  }
  for (size_t k = 0; k < samples.size(); ++k) {
    at::Tensor image = batch.image[static_cast<int64_t>(k)],
               label = batch.label[static_cast<int64_t>(k)];
    materialize_into(samples[k], image, label, how);  // the crop, turn and flip happen here, once
    batch.meta.push_back(std::move(samples[k].meta));
  }
  return batch;
}

// The loader's state: what the workers share with the consumer, under one
// mutex. Private, as PyTorch keeps its worker state out of DataLoader's API.
struct DataLoader::Impl {
  Impl(SampleSource source, Compose transforms, LoaderOptions options);
  ~Impl();
  struct Result;
  void start_epoch(std::vector<int64_t> indices, int64_t epoch);
  std::optional<Batch> next();
  std::vector<Sample> produce(int64_t index, int64_t epoch) const;
  void allocate_batch(const Sample& first, int64_t rows, at::Tensor& image, at::Tensor& label);
  int64_t reserve(int64_t index);
  Result make_result(size_t position, uint64_t generation, int64_t index, int64_t epoch);
  void worker_loop();
  void stop_workers();

  SampleSource source_;
  Compose transforms_;
  LoaderOptions options_;
  bool pinned_ = false;
  Gather gather_ = Gather::kAuto;  // kTensorOps for batches made on a device
  std::vector<int64_t> indices_;
  int64_t epoch_ = 0;
  int64_t num_batches_ = 0;
  int64_t next_batch_ = 0;

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable result_ready_;
  size_t next_position_ = 0;  ///< next position a worker takes
  uint64_t generation_ = 0;   ///< bumped per epoch so stale results are dropped
  struct Result {
    std::vector<Sample> samples;  ///< lazy, or (written) views of their batch rows
    bool written = false;         ///< already in rows_[batch]
    std::exception_ptr error;     ///< rethrown when the batch holding it is asked for
  };
  std::map<size_t, Result> results_;
  /// Each batch's tensors, allocated by the first volume of the batch that is
  /// ready; workers write their crops straight into their rows.
  struct Rows {
    at::Tensor image, label;
    int64_t per_volume = 0;
  };
  std::map<int64_t, Rows> rows_;
  /// Pageable batches' buffers; pinned ones come from (and return to) the
  /// CUDA host allocator, which reuses a block only after the asynchronous
  /// copies recorded on it have finished (a pool of ours cannot see them).
  BatchPool pool_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

DataLoader::Impl::Impl(SampleSource source, Compose transforms, LoaderOptions options)
    : source_(std::move(source)),
      transforms_(std::move(transforms)),
      options_(options),
      pool_(static_cast<size_t>(std::max<int64_t>(options.prefetch_batches, 1) + 2)) {
  options_.validate();
  if (!source_) throw std::invalid_argument("DataLoader: source is empty");
  pinned_ = !options_.device && (options_.pin_memory == PinMemory::kOn ||
                                 (options_.pin_memory == PinMemory::kAuto && at::hasCUDA()));
  if (options_.device) gather_ = Gather::kTensorOps;
  try {
    for (int64_t w = 0; w < options_.workers; ++w) threads_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    stop_workers();  // join those that started: a joinable std::thread must not be destroyed
    throw std::runtime_error("DataLoader: could not start worker thread " +
                             std::to_string(threads_.size() + 1) + " of " +
                             std::to_string(options_.workers) + ": " + e.what());
  }
}

DataLoader::Impl::~Impl() { stop_workers(); }

void DataLoader::Impl::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::vector<Sample> DataLoader::Impl::produce(int64_t index, int64_t epoch) const {
  try {
    Sample sample = source_(index);
    sample.meta.index = index;
    if (options_.device) {  // no-ops for a cache on that device
      sample.image = sample.image.to(*options_.device);
      sample.label = sample.label.to(*options_.device);
    }
    const uint64_t seed = SeedStreams(options_.seed).sample_seed(index, epoch);
    return transforms_.lazy(std::move(sample), seed);
  } catch (const std::exception& e) {
    throw std::runtime_error("DataLoader: dataset index " + std::to_string(index) + ": " +
                             e.what());
  }
}

// The rows of a batch: on the device, or pinned ones from the CUDA host
// allocator (both allocators recycle their blocks); pageable ones from the
// pool, the label after the image (aligned to 64 bytes). Called under mutex_.
void DataLoader::Impl::allocate_batch(const Sample& first, int64_t rows, at::Tensor& image,
                                      at::Tensor& label) {
  if (pinned_ || options_.device) {
    allocate_rows(first, rows, options_.label_dtype, pinned_, image, label);
    return;
  }
  const RowShapes r = row_shapes(first, rows, options_.label_dtype);
  const size_t label_offset = label_offset_of(r, first);
  const c10::Storage buffer = pool_.acquire(buffer_bytes(r, first));
  image = tensor_over(buffer, 0, r.image, first.image.options());
  label = tensor_over(buffer, label_offset, r.label, first.label.options().dtype(r.label_dtype));
}

int64_t DataLoader::Impl::reserve(int64_t index) {
  if (pinned_ || options_.device) return 0;
  std::vector<Sample> crops;
  try {
    crops = produce(index, 0);  // lazy: nothing is copied
  } catch (const std::exception&) {
    return 0;  // next() raises it for the batch that holds the item, as ever
  }
  if (crops.empty()) return 0;
  const RowShapes r = row_shapes(crops[0], options_.batch_size * static_cast<int64_t>(crops.size()),
                                 options_.label_dtype);
  return static_cast<int64_t>(
      pool_.reserve(buffer_bytes(r, crops[0]), std::max<int64_t>(options_.workers, 1), mutex_));
}

// Produces the samples of `position` and, when they fit the rows of their
// batch (the usual case: every volume gives the same number of same-shaped
// crops), writes them straight into those rows: the crop, rotation and flip
// cost one copy, made by the worker, and next() has nothing left to copy.
auto DataLoader::Impl::make_result(size_t position, uint64_t generation, int64_t index,
                                   int64_t epoch) -> Result {
  Result result;
  try {
    result.samples = produce(index, epoch);
  } catch (...) {
    result.error = std::current_exception();
    return result;
  }
  try {
    const auto batch_size = static_cast<size_t>(options_.batch_size);
    const auto batch = static_cast<int64_t>(position / batch_size);
    const auto slot = static_cast<int64_t>(position % batch_size);
    Rows rows;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation != generation_ || result.samples.empty()) return result;
      Rows& r = rows_[batch];
      if (!r.image.defined()) {
        const size_t begin = static_cast<size_t>(batch) * batch_size;
        const auto volumes =
            static_cast<int64_t>(std::min(indices_.size(), begin + batch_size) - begin);
        r.per_volume = static_cast<int64_t>(result.samples.size());
        allocate_batch(result.samples[0], volumes * r.per_volume, r.image, r.label);
      }
      rows = r;
    }
    if (static_cast<int64_t>(result.samples.size()) != rows.per_volume) return result;
    for (const Sample& s : result.samples) {
      if (!fits(s, rows.image, rows.label, options_.label_dtype))
        return result;  // next() collates this batch (and names the misfit)
    }
    for (size_t k = 0; k < result.samples.size(); ++k) {
      Sample& s = result.samples[k];
      const int64_t row = slot * rows.per_volume + static_cast<int64_t>(k);
      at::Tensor image = rows.image[row], label = rows.label[row];
      materialize_into(s, image, label, gather_);
      s.image = image;
      s.label = label;
      s.view.reset();
      s.indices.reset();
    }
    result.written = true;
  } catch (const std::exception& e) {
    result.error = std::make_exception_ptr(
        std::runtime_error("DataLoader: dataset index " + std::to_string(index) + ": " + e.what()));
  }
  return result;
}

void DataLoader::Impl::start_epoch(std::vector<int64_t> indices, int64_t epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    indices_ = std::move(indices);
    epoch_ = epoch;
    const auto n = static_cast<int64_t>(indices_.size());
    num_batches_ = options_.drop_last_batch
                       ? n / options_.batch_size
                       : n / options_.batch_size + (n % options_.batch_size != 0 ? 1 : 0);
    if (options_.drop_last_batch)
      indices_.resize(static_cast<size_t>(num_batches_ * options_.batch_size));
    next_batch_ = 0;
    next_position_ = 0;
    results_.clear();
    rows_.clear();
  }
  work_ready_.notify_all();
}

void DataLoader::Impl::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Bounded prefetch: only positions of the batches up to next_batch_ + prefetch.
    const auto limit = [&] {
      return std::min(
          indices_.size(),
          static_cast<size_t>((next_batch_ + options_.prefetch_batches) * options_.batch_size));
    };
    work_ready_.wait(lock, [&] { return stopping_ || next_position_ < limit(); });
    if (stopping_) return;
    const size_t position = next_position_++;
    const uint64_t generation = generation_;
    const int64_t index = indices_[position];
    const int64_t epoch = epoch_;
    lock.unlock();
    Result result = make_result(position, generation, index, epoch);
    lock.lock();
    if (generation != generation_) continue;  // an epoch restarted meanwhile
    results_.emplace(position, std::move(result));
    result_ready_.notify_all();
  }
}

std::optional<Batch> DataLoader::Impl::next() {
  if (next_batch_ >= num_batches_) return std::nullopt;
  const size_t begin = static_cast<size_t>(next_batch_ * options_.batch_size);
  const size_t end = std::min(indices_.size(), begin + static_cast<size_t>(options_.batch_size));
  std::vector<Result> parts;
  const auto t0 = std::chrono::steady_clock::now();
  if (threads_.empty()) {
    for (size_t p = begin; p < end; ++p)
      parts.push_back(make_result(p, generation_, indices_[p], epoch_));
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    result_ready_.wait(lock, [&] {
      for (size_t p = begin; p < end; ++p) {
        if (!results_.count(p)) return false;
      }
      return true;
    });
    for (size_t p = begin; p < end; ++p) parts.push_back(std::move(results_.extract(p).mapped()));
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Rows rows;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto node = rows_.extract(next_batch_);
    if (!node.empty()) rows = node.mapped();
    ++next_batch_;
  }
  work_ready_.notify_all();
  for (const Result& r : parts) {
    if (r.error) std::rethrow_exception(r.error);
  }
  bool all_written = true;
  for (const Result& r : parts) all_written = all_written && r.written;
  Batch batch;
  if (all_written && rows.image.defined()) {
    batch.image = rows.image;
    batch.label = rows.label;
    for (Result& r : parts) {
      for (Sample& s : r.samples) batch.meta.push_back(std::move(s.meta));
    }
  } else {
    std::vector<Sample> samples;
    for (Result& r : parts) {
      for (Sample& s : r.samples) samples.push_back(std::move(s));
    }
    batch = collate(std::move(samples), options_.label_dtype, pinned_, gather_);
  }
  batch.step = next_batch_ - 1;
  batch.wait_seconds = waited;
  return batch;
}

DataLoader::DataLoader(SampleSource source, Compose transforms, LoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(source), std::move(transforms), options)) {}
DataLoader::~DataLoader() = default;
void DataLoader::start_epoch(std::vector<int64_t> indices, int64_t epoch) {
  impl_->start_epoch(std::move(indices), epoch);
}
std::optional<Batch> DataLoader::next() { return impl_->next(); }
int64_t DataLoader::num_batches() const { return impl_->num_batches_; }
const LoaderOptions& DataLoader::options() const { return impl_->options_; }
bool DataLoader::pinned() const { return impl_->pinned_; }
int64_t DataLoader::reserve(int64_t index) { return impl_->reserve(index); }

}  // namespace volshard
