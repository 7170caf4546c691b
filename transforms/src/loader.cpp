#include "volshard/transforms/loader.h"

#include <ATen/ATen.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace volshard {

bool tune_allocator_for_volumes() {
#if defined(__GLIBC__)
  return mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
#else
  return false;
#endif
}

void LoaderOptions::validate() const {
  if (batch_size < 1) throw std::invalid_argument("DataLoader: batch_size=" + std::to_string(batch_size) + " must be >= 1");
  if (workers < 0) throw std::invalid_argument("DataLoader: workers=" + std::to_string(workers) + " must be >= 0");
  if (prefetch_batches < 1) {
    throw std::invalid_argument("DataLoader: prefetch_batches=" + std::to_string(prefetch_batches) + " must be >= 1");
  }
}

Batch collate(std::vector<Sample> samples) {
  Batch batch;
  if (samples.empty()) return batch;
  std::vector<at::Tensor> images, labels;
  for (size_t k = 0; k < samples.size(); ++k) {
    if (samples[k].image.sizes() != samples[0].image.sizes() || samples[k].label.sizes() != samples[0].label.sizes()) {
      throw std::invalid_argument("collate: sample " + std::to_string(k) + " (dataset index " +
                                  std::to_string(samples[k].meta.index) + ") has another shape than sample 0");
    }
    images.push_back(samples[k].image);
    labels.push_back(samples[k].label);
    batch.meta.push_back(std::move(samples[k].meta));
  }
  batch.image = at::stack(images);
  batch.label = at::stack(labels);
  return batch;
}

DataLoader::DataLoader(SampleSource source, Compose transforms, LoaderOptions options)
    : source_(std::move(source)), transforms_(std::move(transforms)), options_(options) {
  options_.validate();
  if (!source_) throw std::invalid_argument("DataLoader: source is empty");
  for (int64_t w = 0; w < options_.workers; ++w) threads_.emplace_back([this] { worker_loop(); });
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::vector<Sample> DataLoader::produce(int64_t index, int64_t epoch) const {
  try {
    Sample sample = source_(index);
    sample.meta.index = index;
    const uint64_t seed = SeedStreams(options_.seed).sample_seed(index, epoch);
    return transforms_(std::move(sample), seed);
  } catch (const std::exception& e) {
    throw std::runtime_error("DataLoader: dataset index " + std::to_string(index) + ": " + e.what());
  }
}

void DataLoader::start_epoch(std::vector<int64_t> indices, int64_t epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    indices_ = std::move(indices);
    epoch_ = epoch;
    const auto n = static_cast<int64_t>(indices_.size());
    num_batches_ = options_.drop_last_batch ? n / options_.batch_size
                                            : n / options_.batch_size + (n % options_.batch_size != 0 ? 1 : 0);
    if (options_.drop_last_batch) indices_.resize(static_cast<size_t>(num_batches_ * options_.batch_size));
    next_batch_ = 0;
    next_position_ = 0;
    results_.clear();
  }
  work_ready_.notify_all();
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Bounded prefetch: only positions of the batches up to next_batch_ + prefetch.
    const auto limit = [&] {
      return std::min(indices_.size(),
                      static_cast<size_t>((next_batch_ + options_.prefetch_batches) * options_.batch_size));
    };
    work_ready_.wait(lock, [&] { return stopping_ || next_position_ < limit(); });
    if (stopping_) return;
    const size_t position = next_position_++;
    const uint64_t generation = generation_;
    const int64_t index = indices_[position];
    const int64_t epoch = epoch_;
    lock.unlock();
    Result result;
    try {
      result.samples = produce(index, epoch);
    } catch (...) {
      result.error = std::current_exception();
    }
    lock.lock();
    if (generation != generation_) continue;  // an epoch restarted meanwhile
    results_.emplace(position, std::move(result));
    result_ready_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (next_batch_ >= num_batches_) return std::nullopt;
  const size_t begin = static_cast<size_t>(next_batch_ * options_.batch_size);
  const size_t end = std::min(indices_.size(), begin + static_cast<size_t>(options_.batch_size));
  std::vector<Sample> samples;
  const auto t0 = std::chrono::steady_clock::now();
  if (threads_.empty()) {
    for (size_t p = begin; p < end; ++p) {
      for (auto& s : produce(indices_[p], epoch_)) samples.push_back(std::move(s));
    }
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    result_ready_.wait(lock, [&] {
      for (size_t p = begin; p < end; ++p) {
        if (!results_.count(p)) return false;
      }
      return true;
    });
    for (size_t p = begin; p < end; ++p) {
      if (results_.at(p).error) std::rethrow_exception(results_.at(p).error);
    }
    for (size_t p = begin; p < end; ++p) {
      auto node = results_.extract(p);
      for (auto& s : node.mapped().samples) samples.push_back(std::move(s));
    }
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++next_batch_;
  }
  work_ready_.notify_all();
  Batch batch = collate(std::move(samples));
  batch.step = next_batch_ - 1;
  batch.wait_seconds = waited;
  return batch;
}

}  // namespace volshard
