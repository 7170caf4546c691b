#pragma once
// A distributed sampler whose per-rank indices equal PyTorch's
// torch.utils.data.DistributedSampler and MONAI's monai.data.DistributedSampler.
// Standard library only.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "volshard/core/seed_streams.h"  // epoch_seed

namespace volshard {

/// How the epoch's permutation is cut into W equal (or not) shards.
enum class PartitionMode {
  kPad,       ///< PyTorch drop_last=False, MONAI even_divisible=True: wrap to ceil(n/W)*W
  kDropLast,  ///< PyTorch drop_last=True: drop the tail down to floor(n/W)*W
  kUneven,    ///< MONAI even_divisible=False: every index once, ranks r < n%W get one more
};

/// "pad" | "drop_last" | "uneven".
std::string to_string(PartitionMode mode);
/// Inverse of to_string; throws std::invalid_argument naming the value.
PartitionMode parse_partition_mode(const std::string& text);

/// Which PyTorch's randperm to reproduce. They agree for n < 214,748,364
/// (2^32 / 20); at and above it PyTorch 2.x switched to an inside-out shuffle
/// with 64-bit draws while PyTorch <= 1.13 keeps the forward Fisher-Yates.
enum class RandpermCompat {
  kTorch2,  ///< current PyTorch (default)
  kTorch1,  ///< PyTorch 1.x, e.g. Debian 12's python3-torch 1.13
};

/// "torch2" | "torch1".
std::string to_string(RandpermCompat compat);
/// Accepts "torch2", "2", "torch1", "1", "1.13"; throws std::invalid_argument naming the value.
RandpermCompat parse_randperm_compat(const std::string& text);

struct DistributedSamplerOptions {
  int64_t dataset_size = 0;  ///< samples, in [0, kMaxDatasetSize]
  int64_t num_replicas = 1;  ///< world size, >= 1
  int64_t rank = 0;          ///< in [0, num_replicas)
  bool shuffle = true;
  uint64_t seed = 0;  ///< epoch e is shuffled with (seed + e) mod 2^32, as PyTorch
  PartitionMode mode = PartitionMode::kPad;
  RandpermCompat randperm = RandpermCompat::kTorch2;  ///< matters only for n >= 214,748,364
  /// Each iterate() after the first without set_epoch() in between advances
  /// the epoch by one instead of warning that the order repeats.
  bool auto_advance_epoch = false;
};

/// Indices are stored as uint32: a dataset may hold at most 2^32 - 1 samples.
constexpr int64_t kMaxDatasetSize = 0xFFFFFFFFLL;

/// Sizes of one epoch's cut, a pure function of (n, W, mode, start); validates them.
///
/// `start` supports resuming mid-epoch, also at another world size: the
/// epoch's permutation positions [0, start) were already read by all ranks
/// together (with synchronous data parallelism: steps x batch x W_before), and
/// the rest of the permutation, positions [start, n), is cut again with the
/// mode's rule for num_replicas ranks: padded by repeating the permutation from
/// its start (as PyTorch pads), truncated, or split unevenly. With start = 0
/// this is PyTorch's cut; with the same W and start a multiple of W it is
/// exactly the remainder of the uninterrupted epoch.
struct ShardLayout {
  int64_t dataset_size = 0;
  int64_t num_replicas = 1;
  PartitionMode mode = PartitionMode::kPad;
  int64_t start = 0;       ///< permutation positions consumed before, in [0, n]
  int64_t total_size = 0;  ///< positions of the padded/truncated (remaining) order

  /// Throws std::invalid_argument naming the bad value and its valid range.
  /// kUneven refuses n < W only for a whole epoch (start = 0), as MONAI; a
  /// remainder shorter than W leaves the higher ranks empty.
  static ShardLayout make(int64_t dataset_size, int64_t num_replicas, PartitionMode mode,
                          int64_t start = 0);
  /// Samples of the epoch still to be read, n - start.
  int64_t remaining() const { return dataset_size - start; }
  /// Samples rank r reads per epoch; r in [0, num_replicas).
  int64_t num_samples(int64_t rank) const;
  /// The largest num_samples over all ranks (equal to every rank's except in kUneven).
  int64_t max_num_samples() const;
};

/// Read-only view of one rank's indices for one epoch. Cheap to copy; valid
/// until the owning sampler's epoch changes or it is destroyed.
class IndexSpan {
 public:
  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = int64_t;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = int64_t;

    iterator() = default;
    explicit iterator(const uint32_t* p) : p_(p) {}
    int64_t operator*() const { return static_cast<int64_t>(*p_); }
    int64_t operator[](difference_type k) const { return static_cast<int64_t>(p_[k]); }
    iterator& operator++() {
      ++p_;
      return *this;
    }
    iterator operator++(int) {
      iterator t = *this;
      ++p_;
      return t;
    }
    iterator& operator--() {
      --p_;
      return *this;
    }
    iterator operator--(int) {
      iterator t = *this;
      --p_;
      return t;
    }
    iterator& operator+=(difference_type k) {
      p_ += k;
      return *this;
    }
    iterator& operator-=(difference_type k) {
      p_ -= k;
      return *this;
    }
    friend iterator operator+(iterator it, difference_type k) { return it += k; }
    friend iterator operator+(difference_type k, iterator it) { return it += k; }
    friend iterator operator-(iterator it, difference_type k) { return it -= k; }
    friend difference_type operator-(iterator a, iterator b) { return a.p_ - b.p_; }
    friend bool operator==(iterator a, iterator b) { return a.p_ == b.p_; }
    friend bool operator!=(iterator a, iterator b) { return a.p_ != b.p_; }
    friend bool operator<(iterator a, iterator b) { return a.p_ < b.p_; }
    friend bool operator>(iterator a, iterator b) { return a.p_ > b.p_; }
    friend bool operator<=(iterator a, iterator b) { return a.p_ <= b.p_; }
    friend bool operator>=(iterator a, iterator b) { return a.p_ >= b.p_; }

   private:
    const uint32_t* p_ = nullptr;
  };

  IndexSpan() = default;
  IndexSpan(const uint32_t* data, int64_t size) : data_(data), size_(size) {}
  int64_t size() const { return size_; }
  const uint32_t* data() const { return data_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](int64_t i) const { return static_cast<int64_t>(data_[i]); }
  /// Bounds-checked; throws std::out_of_range naming i and size.
  int64_t at(int64_t i) const;
  iterator begin() const { return iterator(data_); }
  iterator end() const { return iterator(data_ + size_); }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

 private:
  const uint32_t* data_ = nullptr;
  int64_t size_ = 0;
};

struct SamplerState;

/// One rank's view of a dataset shuffled and sharded as PyTorch does:
/// rank r reads positions r, r+W, r+2W, ... of the epoch's global order.
/// Not thread-safe: indices() computes the epoch lazily.
class DistributedSampler {
 public:
  /// Validates here, once: throws std::invalid_argument naming the value.
  explicit DistributedSampler(const DistributedSamplerOptions& options);
  ~DistributedSampler();
  DistributedSampler(DistributedSampler&&) noexcept;
  DistributedSampler& operator=(DistributedSampler&&) noexcept;

  /// A sampler for `rank` of `num_replicas` that continues the epoch a state
  /// was saved in, from where all ranks together stopped; num_replicas may
  /// differ from the saved world size (elastic resume, see ShardLayout).
  /// Throws std::invalid_argument naming a bad rank, world size or field.
  static DistributedSampler restore(const SamplerState& state, int64_t rank, int64_t num_replicas);

  /// Stores the epoch, like PyTorch's set_epoch: call it before every epoch or
  /// every epoch reads the same order. A different epoch starts from its
  /// beginning; the same epoch keeps a restored mid-epoch start.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  /// This rank's sample count for the current epoch (what is left of it after
  /// a mid-epoch restore).
  int64_t num_samples() const { return num_samples_; }
  /// Length of the padded/truncated global order (n in kUneven), or of the
  /// remaining order after a mid-epoch restore.
  int64_t total_size() const { return layout_.total_size; }
  const DistributedSamplerOptions& options() const { return options_; }
  const ShardLayout& layout() const { return layout_; }

  /// This rank's indices for the current epoch. Computed on first call per
  /// epoch in O(n) time and n*4 bytes peak, then kept (num_samples*4 bytes).
  IndexSpan indices() const&;
  /// On a temporary sampler, a copy: a view would outlive its storage.
  std::vector<int64_t> indices() &&;

  /// Starts a pass over the epoch, as Python's iter(sampler), and returns
  /// indices(). A second pass without set_epoch() in between reads the same
  /// order again: it warns once per sampler (volshard::warn), or, with
  /// options.auto_advance_epoch, advances the epoch first.
  IndexSpan iterate();

  /// Records that this rank (and, with synchronous data parallelism, every
  /// rank) has consumed the first `rank_samples` of indices() in this epoch,
  /// e.g. steps x batch size. Throws std::out_of_range unless
  /// 0 <= rank_samples <= num_samples().
  void set_position(int64_t rank_samples);
  int64_t position() const { return position_; }

  /// What restore() needs to continue from here.
  SamplerState state() const;

 private:
  struct Buffer;
  void set_start(int64_t start);
  DistributedSamplerOptions options_;
  ShardLayout layout_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  bool passed_this_epoch_ = false;
  bool warned_repeat_ = false;
  mutable std::unique_ptr<Buffer> buffer_;
};

/// A sampler's resumable state. JSON (a version field, then the fields below):
/// {"version":1,"seed":S,"epoch":E,"mode":"pad","shuffle":true,"randperm":"torch2",
///  "dataset_size":N,"world_size":W,"consumed":C}.
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  PartitionMode mode = PartitionMode::kPad;
  bool shuffle = true;
  RandpermCompat randperm = RandpermCompat::kTorch2;
  int64_t dataset_size = 0;
  int64_t world_size = 1;  ///< when saved; restore() may use another
  int64_t consumed = 0;    ///< permutation positions of this epoch read by all ranks, in [0, n]

  /// The state of samplers with these options at `epoch`, `consumed` positions in.
  static SamplerState at(const DistributedSamplerOptions& options, int64_t epoch, int64_t consumed);
  /// Options for `rank` of `world_size` ranks with this state's settings
  /// (auto_advance_epoch off).
  DistributedSamplerOptions sampler_options(int64_t rank, int64_t world_size) const;

  std::string to_json() const;
  /// Throws std::invalid_argument naming a missing, mistyped or out-of-range field.
  static SamplerState from_json(const std::string& text);
  bool operator==(const SamplerState& other) const;
};

/// torch.randperm(n, generator seeded with seed) on CPU, as uint32 values.
/// Forward Fisher-Yates on std::mt19937(uint32(seed)) with z = mt() % (n - i);
/// with kTorch2 and n >= 214,748,364, PyTorch 2's inside-out variant with
/// 64-bit draws. Throws std::invalid_argument if n is outside [0, kMaxDatasetSize].
std::vector<uint32_t> randperm(int64_t n, uint64_t seed,
                               RandpermCompat compat = RandpermCompat::kTorch2);

/// The epoch's whole global order of total_size positions (padded by wrapping,
/// or truncated), exactly the `indices` list PyTorch strides over; with
/// layout.start > 0, the remaining order. A plain, unoptimised reference:
/// O(n + total_size) memory.
std::vector<int64_t> global_order(const ShardLayout& layout, bool shuffle, uint64_t seed,
                                  int64_t epoch, RandpermCompat compat = RandpermCompat::kTorch2);

namespace detail {
/// Either shuffle algorithm at any n, for tests: the fast per-rank path and
/// the plain reference (std::mt19937, whole permutation).
std::vector<int64_t> shard_indices(const DistributedSamplerOptions& options, int64_t epoch,
                                   bool inside_out);
std::vector<uint32_t> reference_randperm(int64_t n, uint64_t seed, bool inside_out);
}  // namespace detail

}  // namespace volshard
