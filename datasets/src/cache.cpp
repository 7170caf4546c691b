#include "volshard/datasets/cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace volshard {

void CacheOptions::validate() const {
  if (!(cache_rate >= 0.0 && cache_rate <= 1.0)) {
    throw std::invalid_argument("SampleCache: cache_rate=" + std::to_string(cache_rate) + " must be in [0, 1]");
  }
  if (max_bytes < -1) throw std::invalid_argument("SampleCache: max_bytes=" + std::to_string(max_bytes) + " must be >= -1");
  if (threads < 1) throw std::invalid_argument("SampleCache: threads=" + std::to_string(threads) + " must be >= 1");
}

int64_t sample_bytes(const Sample& s) {
  const auto tensor = [](const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  const size_t indices = s.indices ? s.indices->foreground.size() + s.indices->background.size() : 0;
  return tensor(s.image) + tensor(s.label) + static_cast<int64_t>(indices * sizeof(int32_t));
}

SampleCache::SampleCache(SampleSource prepare, int64_t size, CacheOptions options)
    : prepare_(std::move(prepare)), size_(size), items_(static_cast<size_t>(std::max<int64_t>(size, 0))) {
  options.validate();
  if (size < 0) throw std::invalid_argument("SampleCache: size=" + std::to_string(size) + " must be >= 0");
  if (!prepare_) throw std::invalid_argument("SampleCache: prepare is empty");
  const auto wanted = static_cast<int64_t>(static_cast<double>(size) * options.cache_rate);
  std::atomic<int64_t> next{0}, done{0}, bytes{0};
  std::atomic<bool> full{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  const bool bar = options.progress && isatty(STDERR_FILENO);
  const auto fill = [&] {
    for (int64_t i = next++; i < wanted && !full; i = next++) {
      try {
        Sample s = prepare_(i);
        const int64_t b = sample_bytes(s);
        if (bytes.fetch_add(b) + b > options.max_bytes && options.max_bytes >= 0) {
          bytes -= b;
          full = true;  // items from here on are prepared on demand
          break;
        }
        items_[static_cast<size_t>(i)] = std::move(s);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        full = true;
      }
      const int64_t d = ++done;
      if (bar) std::fprintf(stderr, "\rcaching %lld/%lld", static_cast<long long>(d), static_cast<long long>(wanted));
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < options.threads; ++t) pool.emplace_back(fill);
  fill();
  for (auto& t : pool) t.join();
  if (bar) std::fprintf(stderr, "\n");
  if (error) std::rethrow_exception(error);
  bytes_ = bytes;
}

int64_t SampleCache::cached_items() const {
  int64_t n = 0;
  for (const auto& item : items_) n += item.has_value() ? 1 : 0;
  return n;
}

Sample SampleCache::get(int64_t index) const {
  if (index < 0 || index >= size_) {
    throw std::out_of_range("SampleCache: index=" + std::to_string(index) + " out of range [0, " +
                            std::to_string(size_) + ")");
  }
  const auto& item = items_[static_cast<size_t>(index)];
  return item ? *item : prepare_(index);
}

SampleSource SampleCache::source() const {
  return [this](int64_t index) { return get(index); };
}

}  // namespace volshard
