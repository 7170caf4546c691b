#include "volshard/datasets/loader.h"

#include <ATen/ATen.h>
#include <c10/core/Storage.h>

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

#include "batch_rows.h"
#include "volshard/core/error.h"
#include "volshard/core/limits.h"
#include "volshard/core/seed_streams.h"

namespace volshard {

using namespace detail;

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
