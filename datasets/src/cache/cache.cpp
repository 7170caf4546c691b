#include "volshard/datasets/cache.h"
#include "volshard/core/file_io.h"
#include "volshard/core/large_blocks.h"
#include "volshard/core/limits.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "cache_entry.h"
#include "volshard/core/log.h"
#include "volshard/core/parallel.h"
#include "volshard/core/progress.h"

namespace volshard {

struct SampleCache::Counters {
  std::atomic<int64_t> loaded{0};
  std::atomic<int64_t> prepared{0};
  std::atomic<int64_t> rejected{0};
};

namespace {

// Fails now, naming the folder, rather than with a warning per item later.
void check_cache_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("SampleCache: cache_dir=" + dir +
                             ": cannot create the folder: " + ec.message());
  static std::atomic<uint64_t> counter{0};
  const std::string probe =
      (std::filesystem::path(dir) /
       (".write-probe-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
          .string();
  if (!Fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)).is_open()) {
    throw std::runtime_error("SampleCache: cache_dir=" + dir +
                             " is not writable: " + std::strerror(errno));
  }
  ::unlink(probe.c_str());
}

}  // namespace

ItemFiles files_of(std::vector<ImageLabelPair> pairs) {
  return [pairs = std::move(pairs)](int64_t index) -> std::vector<std::string> {
    const auto& p = pairs.at(static_cast<size_t>(index));
    return {p.image, p.label};
  };
}

void CacheOptions::validate() const {
  if (!(cache_rate >= 0.0 && cache_rate <= 1.0)) {
    throw std::invalid_argument("SampleCache: cache_rate=" + std::to_string(cache_rate) +
                                " must be in [0, 1]");
  }
  if (max_bytes < -1)
    throw std::invalid_argument("SampleCache: max_bytes=" + std::to_string(max_bytes) +
                                " must be >= -1");
  if (threads < 1 || threads > kMaxThreads)
    throw std::invalid_argument("SampleCache: threads=" + std::to_string(threads) +
                                " must be in [1, " + std::to_string(kMaxThreads) + "]");
  if (!cache_dir.empty() && !item_files) {
    throw std::invalid_argument(
        "SampleCache: cache_dir=" + cache_dir +
        " needs item_files (the files whose contents key each item's entry)");
  }
}

int64_t sample_bytes(const Sample& s) {
  const auto tensor = [](const at::Tensor& t) {
    return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  };
  const size_t indices =
      s.indices ? s.indices->foreground.size() + s.indices->background.size() : 0;
  return tensor(s.image) + tensor(s.label) + static_cast<int64_t>(indices * sizeof(int32_t));
}

SampleCache::SampleCache(SampleSource prepare, int64_t size, CacheOptions opts)
    : prepare_(std::move(prepare)),
      size_(size),
      options_(std::move(opts)),
      items_(static_cast<size_t>(std::max<int64_t>(size, 0))),
      counters_(std::make_shared<Counters>()) {
  const CacheOptions& options = options_;
  options.validate();
  if (size < 0)
    throw std::invalid_argument("SampleCache: size=" + std::to_string(size) + " must be >= 0");
  if (!prepare_) throw std::invalid_argument("SampleCache: prepare is empty");
  if (!options.cache_dir.empty()) check_cache_dir(options.cache_dir);
  const auto wanted = static_cast<int64_t>(static_cast<double>(size) * options.cache_rate);
  std::atomic<int64_t> bytes{0};
  std::vector<int64_t> item_bytes(static_cast<size_t>(std::max<int64_t>(wanted, 0)), 0);
  Progress progress("caching", wanted, "volumes",
                    options.progress ? ProgressStyle::kAuto : ProgressStyle::kOff);
  parallel_items(
      wanted, options.threads,
      [&](int64_t i) {
        Sample s = load_or_prepare(i);
        if (options.device) {  // the label indices stay in host memory, where the crops read them
          s.image = s.image.to(*options.device);
          s.label = s.label.to(*options.device);
        }
        const int64_t b = sample_bytes(s);
        item_bytes[static_cast<size_t>(i)] = b;
        items_[static_cast<size_t>(i)] = std::move(s);
        // Over the budget: no thread takes another item (those running finish).
        return options.max_bytes < 0 || bytes.fetch_add(b) + b <= options.max_bytes;
      },
      [&](int64_t done, int64_t) { progress.update(done); });
  progress.finish();
  // The threads finish in any order: keep the first items that fit, as one
  // thread would. Every one of them was prepared: the fill stops only once
  // the items taken, all of index below the next one, exceed the budget.
  int64_t kept = 0;
  bool full = false;
  for (int64_t i = 0; i < wanted; ++i) {
    auto& item = items_[static_cast<size_t>(i)];
    const int64_t b = item_bytes[static_cast<size_t>(i)];
    full = full || !item || (options.max_bytes >= 0 && kept + b > options.max_bytes);
    if (full) {
      item.reset();  // prepared on demand
    } else {
      kept += b;
    }
  }
  bytes_ = kept;
  // The fill's file buffers and intermediate volumes went back to the large-
  // block cache and glibc's heap, which keep them for the next load; with
  // every item cached there is none, and a CT fill kept ~3 GB for a 0.6 GB
  // cache. They go back to the kernel.
  if (cached_items() == size_) release_free_memory();
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
  return item ? *item : load_or_prepare(index);
}

Sample SampleCache::load_or_prepare(int64_t index) const {
  if (options_.cache_dir.empty()) {
    ++counters_->prepared;
    return prepare_(index);
  }
  const detail::EntryKey key =
      detail::make_entry_key(options_.config_key, options_.item_files(index), index);
  const std::string path =
      (std::filesystem::path(options_.cache_dir) / detail::entry_file_name(key.hash)).string();
  try {
    if (auto loaded = detail::read_entry(path, key, index)) {
      ++counters_->loaded;
      return std::move(*loaded);
    }
  } catch (const detail::BadEntry& e) {
    ++counters_->rejected;
    warn("SampleCache: " + path + ": " + e.what() + "; not used: item " + std::to_string(index) +
         " is prepared again and its entry rewritten");
  }
  Sample s = prepare_(index);
  ++counters_->prepared;
  try {
    detail::write_entry(path, key, index, s);
  } catch (const std::exception& e) {
    // The sample itself is fine; only the next run loses its head start.
    warn("SampleCache: cannot write the entry of item " + std::to_string(index) +
         " (kept in memory only): " + e.what());
  }
  return s;
}

int64_t SampleCache::loaded_from_disk() const { return counters_->loaded; }
int64_t SampleCache::prepared() const { return counters_->prepared; }
int64_t SampleCache::rejected_entries() const { return counters_->rejected; }

std::string SampleCache::entry_path(int64_t index) const {
  if (options_.cache_dir.empty()) throw std::logic_error("SampleCache::entry_path: no cache_dir");
  if (index < 0 || index >= size_) {
    throw std::out_of_range("SampleCache: index=" + std::to_string(index) + " out of range [0, " +
                            std::to_string(size_) + ")");
  }
  const detail::EntryKey key =
      detail::make_entry_key(options_.config_key, options_.item_files(index), index);
  return (std::filesystem::path(options_.cache_dir) / detail::entry_file_name(key.hash)).string();
}

SampleSource SampleCache::source() const {
  return [this](int64_t index) { return get(index); };
}

}  // namespace volshard
