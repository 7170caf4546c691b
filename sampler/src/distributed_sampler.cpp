#include "volshard/sampler/distributed_sampler.h"

#include "volshard/core/log.h"
#include "volshard/core/mt19937.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace volshard {
namespace {

// torch's randperm_cpu keeps the forward Fisher-Yates with a 32-bit draw below
// this size and switches to an inside-out shuffle with 64-bit draws above it.
constexpr int64_t kSmallPermLimit = static_cast<int64_t>(std::numeric_limits<uint32_t>::max() / 20);

bool uses_inside_out(int64_t n, RandpermCompat compat) {
  return compat == RandpermCompat::kTorch2 && n >= kSmallPermLimit;
}

[[noreturn]] void fail(const std::string& message) {
  throw std::invalid_argument("DistributedSampler: " + message);
}

// The plain reference path draws from std::mt19937; the fast path from
// Mt19937, which gives the same stream.
uint32_t draw32(std::mt19937& eng) { return static_cast<uint32_t>(eng()); }

uint64_t draw64(std::mt19937& eng) {
  const uint32_t first = draw32(eng);
  return join_draws(first, draw32(eng));
}

// Inside-out Fisher-Yates over p[0, n), exactly torch's branch for large n:
// r[i] = r[z]; r[z] = i with z = random64 % (i + 1). The plain reference.
// Needs no initialised buffer (z == i reads nothing).
void shuffle_inside_out(uint32_t* p, int64_t n, std::mt19937& eng) {
  for (int64_t i = 0; i < n; ++i) {
    const auto z = static_cast<int64_t>(draw64(eng) % static_cast<uint64_t>(i + 1));
    p[i] = z == i ? static_cast<uint32_t>(i) : p[z];
    p[z] = static_cast<uint32_t>(i);
  }
}

// malloc-owned so that the n-sized working buffer can be shrunk to the rank's
// num_samples in place (glibc mremaps large blocks), keeping the peak at one
// permutation instead of a permutation plus a copy of the shard.
struct MallocDeleter {
  void operator()(uint32_t* p) const { std::free(p); }
};
using OwnedIndices = std::unique_ptr<uint32_t[], MallocDeleter>;

OwnedIndices allocate_indices(int64_t count) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(uint32_t);
  auto* p = static_cast<uint32_t*>(std::malloc(bytes));
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // The shuffle touches random pages all over the buffer: huge pages cut the
  // TLB misses that otherwise dominate for n >= 1e7. Advisory only.
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes >= 4 * kHuge) {
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
  return OwnedIndices(p);
}

void shrink(OwnedIndices& p, int64_t count) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(uint32_t);
  auto* q = static_cast<uint32_t*>(std::realloc(p.get(), bytes));
  if (q != nullptr) {
    (void)p.release();
    p.reset(q);
  }  // else the larger block stays valid and owned
}

// Positions of the global order that rank r reads: r, r+W, ... < total.
// Unsigned so that stepping past the end with a huge W cannot overflow.
struct RankCursor {
  uint64_t next;
  uint64_t step;
  uint64_t end;
  bool takes(int64_t pos) const { return static_cast<uint64_t>(pos) == next && next < end; }
};

// Fills out[k] for the padded positions pos >= n of rank r, given the first
// head.size() entries of the permutation (pad wraps around the permutation).
int64_t append_padding(uint32_t* out, int64_t k, RankCursor& cur, int64_t n,
                       const std::vector<uint32_t>& head) {
  for (; cur.next < cur.end; cur.next += cur.step) {
    const auto wrapped =
        static_cast<size_t>((cur.next - static_cast<uint64_t>(n)) % static_cast<uint64_t>(n));
    out[k++] = head[wrapped];
  }
  return k;
}

constexpr int64_t kBlock = 512;
constexpr int64_t kRingMask = 2 * kBlock - 1;  // targets of two blocks in flight
constexpr int64_t kAhead = 32;                 // prefetch distance, in steps

// Runs `steps` shuffle steps over p, step i getting its target index. Every
// step is a random access into the n-sized buffer, latency-bound once it
// outgrows the caches; but the targets depend only on the generator, so they
// are drawn a block ahead (bulk draws, independent divisions that pipeline)
// and the target kAhead steps ahead is prefetched, keeping many misses in
// flight. draw(begin, count, out) writes the targets of steps [begin, +count).
template <typename Draw, typename Step>
void prefetched_steps(const uint32_t* p, int64_t steps, Draw draw, Step step) {
  uint32_t target[2 * kBlock];
  const auto draw_block = [&](int64_t begin) {
    const int64_t count = std::min(kBlock, steps - begin);
    if (count > 0) draw(begin, count, target + (begin & kRingMask));
  };
  draw_block(0);
  for (int64_t i = 0; i < std::min(kAhead, steps); ++i) __builtin_prefetch(p + target[i], 1, 3);
  for (int64_t begin = 0; begin < steps; begin += kBlock) {
    draw_block(begin + kBlock);
    const int64_t end = std::min(begin + kBlock, steps);
    for (int64_t i = begin; i < end; ++i) {
      if (i + kAhead < steps) __builtin_prefetch(p + target[(i + kAhead) & kRingMask], 1, 3);
      step(i, target[i & kRingMask]);
    }
  }
}

// One rank's shard of a shuffled epoch in one pass of the forward Fisher-Yates.
// After step i, p[i] is final and never read again, so the rank's entries are
// compacted into the front of the same buffer as they become final.
int64_t shard_forward_fisher_yates(uint32_t* p, int64_t n, Mt19937& eng, RankCursor& cur,
                                   std::vector<uint32_t>& head) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint32_t>(i);
  const auto head_len = static_cast<int64_t>(head.size());
  int64_t k = 0;
  const auto settle = [&](int64_t i) {  // p[i] is final
    if (i < head_len) head[static_cast<size_t>(i)] = p[i];
    if (cur.takes(i)) {
      p[k++] = p[i];
      cur.next += cur.step;
    }
  };
  const auto n32 = static_cast<uint32_t>(n);
  uint32_t draws[kBlock];
  prefetched_steps(
      p, n - 1,  // the last position needs no draw
      [&](int64_t begin, int64_t count, uint32_t* out) {
        eng.fill(draws, static_cast<size_t>(count));
        for (int64_t j = 0; j < count; ++j) {
          const auto i = static_cast<uint32_t>(begin + j);
          out[j] = i + draws[j] % (n32 - i);
        }
      },
      [&](int64_t i, uint32_t target) {
        std::swap(p[i], p[target]);
        settle(i);
      });
  if (n > 0) settle(n - 1);
  return k;
}

// PyTorch 2's inside-out shuffle of all of p (no rank's entry is final before
// the end), then the rank's positions compacted to the front.
int64_t shard_inside_out(uint32_t* p, int64_t n, Mt19937& eng, RankCursor& cur,
                         std::vector<uint32_t>& head) {
  uint32_t draws[2 * kBlock];
  prefetched_steps(
      p, n,
      [&](int64_t begin, int64_t count, uint32_t* out) {
        eng.fill(draws, static_cast<size_t>(2 * count));
        for (int64_t j = 0; j < count; ++j) {
          const uint64_t r64 = join_draws(draws[2 * j], draws[2 * j + 1]);
          out[j] = static_cast<uint32_t>(r64 % static_cast<uint64_t>(begin + j + 1));
        }
      },
      [&](int64_t i, uint32_t z) {
        p[i] = z == i ? static_cast<uint32_t>(i) : p[z];
        p[z] = static_cast<uint32_t>(i);
      });
  std::copy(p, p + head.size(), head.begin());
  int64_t k = 0;
  for (; cur.next < cur.end && cur.next < static_cast<uint64_t>(n); cur.next += cur.step) {
    p[k++] = p[static_cast<int64_t>(cur.next)];
  }
  return k;
}

struct ComputedShard {
  OwnedIndices data;
  int64_t size = 0;
};

ComputedShard compute_shard(const ShardLayout& layout, const DistributedSamplerOptions& options,
                            int64_t epoch, bool inside_out) {
  const int64_t n = layout.dataset_size;
  // Positions of the (remaining) order are permutation positions start + k;
  // those past n are padding, which repeats the permutation from its start.
  const int64_t end = layout.start + layout.total_size;
  RankCursor cur{static_cast<uint64_t>(layout.start + options.rank),
                 static_cast<uint64_t>(layout.num_replicas), static_cast<uint64_t>(end)};
  const int64_t pad = std::max<int64_t>(end - n, 0);
  std::vector<uint32_t> head(static_cast<size_t>(std::min(pad, n)));

  ComputedShard shard;
  int64_t k = 0;
  if (!options.shuffle) {
    shard.data = allocate_indices(layout.num_samples(options.rank));
    uint32_t* out = shard.data.get();
    for (; cur.next < cur.end && cur.next < static_cast<uint64_t>(n); cur.next += cur.step) {
      out[k++] = static_cast<uint32_t>(cur.next);
    }
    for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<uint32_t>(i);
  } else {
    shard.data = allocate_indices(n);
    Mt19937 eng(epoch_seed(options.seed, epoch));
    k = inside_out ? shard_inside_out(shard.data.get(), n, eng, cur, head)
                   : shard_forward_fisher_yates(shard.data.get(), n, eng, cur, head);
  }
  if (n > 0) k = append_padding(shard.data.get(), k, cur, n, head);
  shrink(shard.data, k);
  shard.size = k;
  return shard;
}

void put_field(std::ostringstream& os, const char* name, int64_t value) {
  os << name << '=' << value;
}

}  // namespace

std::string to_string(PartitionMode mode) {
  switch (mode) {
    case PartitionMode::kPad:
      return "pad";
    case PartitionMode::kDropLast:
      return "drop_last";
    case PartitionMode::kUneven:
      return "uneven";
  }
  return "unknown";
}

PartitionMode parse_partition_mode(const std::string& text) {
  if (text == "pad") return PartitionMode::kPad;
  if (text == "drop_last") return PartitionMode::kDropLast;
  if (text == "uneven") return PartitionMode::kUneven;
  throw std::invalid_argument("mode='" + text + "' must be one of pad, drop_last, uneven");
}

std::string to_string(RandpermCompat compat) {
  return compat == RandpermCompat::kTorch1 ? "torch1" : "torch2";
}

RandpermCompat parse_randperm_compat(const std::string& text) {
  if (text == "torch2" || text == "2") return RandpermCompat::kTorch2;
  if (text == "torch1" || text == "1" || text == "1.13") return RandpermCompat::kTorch1;
  throw std::invalid_argument("randperm compat='" + text + "' must be one of torch2, torch1");
}

ShardLayout ShardLayout::make(int64_t dataset_size, int64_t num_replicas, PartitionMode mode,
                              int64_t start) {
  std::ostringstream os;
  if (dataset_size < 0) {
    put_field(os, "dataset_size", dataset_size);
    fail(os.str() + " must be >= 0");
  }
  if (dataset_size > kMaxDatasetSize) {
    put_field(os, "dataset_size", dataset_size);
    fail(os.str() + " must be <= " + std::to_string(kMaxDatasetSize) +
         " (indices are stored as uint32)");
  }
  if (num_replicas < 1) {
    put_field(os, "num_replicas", num_replicas);
    fail(os.str() + " must be >= 1");
  }
  if (start < 0 || start > dataset_size) {
    fail("start=" + std::to_string(start) +
         " must be in [0, dataset_size=" + std::to_string(dataset_size) + "]");
  }
  if (mode == PartitionMode::kUneven && start == 0 && dataset_size < num_replicas) {
    fail("mode=uneven needs dataset_size=" + std::to_string(dataset_size) +
         " >= num_replicas=" + std::to_string(num_replicas) +
         " (MONAI's even_divisible=False refuses fewer samples than ranks)");
  }
  ShardLayout layout;
  layout.dataset_size = dataset_size;
  layout.num_replicas = num_replicas;
  layout.mode = mode;
  layout.start = start;
  const int64_t m = dataset_size - start;
  const int64_t floor_q = m / num_replicas;
  const bool exact = m % num_replicas == 0;
  switch (mode) {
    case PartitionMode::kPad: {
      const int64_t ceil_q = floor_q + (exact ? 0 : 1);
      if (__builtin_mul_overflow(ceil_q, num_replicas, &layout.total_size)) {
        fail("arithmetic overflow: ceil(remaining samples=" + std::to_string(m) +
             " / num_replicas=" + std::to_string(num_replicas) + ") * num_replicas exceeds int64");
      }
      break;
    }
    case PartitionMode::kDropLast:
      // torch: ceil((n - W) / W) when n % W != 0, which is floor(n / W).
      layout.total_size = floor_q * num_replicas;
      break;
    case PartitionMode::kUneven:
      layout.total_size = m;
      break;
  }
  return layout;
}

int64_t ShardLayout::num_samples(int64_t rank) const {
  if (mode != PartitionMode::kUneven) return total_size / num_replicas;
  const int64_t m = remaining();
  return m / num_replicas + (rank < m % num_replicas ? 1 : 0);
}

int64_t ShardLayout::max_num_samples() const { return num_samples(0); }

int64_t IndexSpan::at(int64_t i) const {
  if (i < 0 || i >= size_) {
    throw std::out_of_range("IndexSpan: index=" + std::to_string(i) + " out of range [0, " +
                            std::to_string(size_) + ")");
  }
  return (*this)[i];
}

struct DistributedSampler::Buffer {
  int64_t epoch = 0;
  int64_t size = 0;
  OwnedIndices data;
};

DistributedSampler::DistributedSampler(const DistributedSamplerOptions& options)
    : options_(options),
      layout_(ShardLayout::make(options.dataset_size, options.num_replicas, options.mode)) {
  if (options.rank < 0 || options.rank >= options.num_replicas) {
    fail("rank=" + std::to_string(options.rank) +
         " must be in [0, num_replicas=" + std::to_string(options.num_replicas) + ")");
  }
  num_samples_ = layout_.num_samples(options.rank);
}

DistributedSampler::~DistributedSampler() = default;
DistributedSampler::DistributedSampler(DistributedSampler&&) noexcept = default;
DistributedSampler& DistributedSampler::operator=(DistributedSampler&&) noexcept = default;

DistributedSampler DistributedSampler::restore(const SamplerState& state, int64_t rank,
                                               int64_t num_replicas) {
  const DistributedSamplerOptions o = state.sampler_options(rank, num_replicas);
  if (state.consumed < 0 || state.consumed > state.dataset_size) {
    fail("state consumed=" + std::to_string(state.consumed) +
         " must be in [0, dataset_size=" + std::to_string(state.dataset_size) + "]");
  }
  // A whole epoch is validated as such (uneven refuses n < W); a remainder
  // shorter than the world just leaves ranks empty.
  DistributedSamplerOptions whole = o;
  if (state.consumed > 0) whole.mode = PartitionMode::kPad;
  DistributedSampler sampler(whole);
  sampler.options_ = o;
  sampler.epoch_ = state.epoch;
  sampler.set_start(state.consumed);
  return sampler;
}

void DistributedSampler::set_start(int64_t start) {
  layout_ = ShardLayout::make(options_.dataset_size, options_.num_replicas, options_.mode, start);
  num_samples_ = layout_.num_samples(options_.rank);
  position_ = 0;
  buffer_.reset();
}

void DistributedSampler::set_epoch(int64_t epoch) {
  passed_this_epoch_ = false;
  if (epoch == epoch_) return;  // keeps a restored mid-epoch start
  epoch_ = epoch;
  if (layout_.start != 0) {
    set_start(0);
  } else {
    position_ = 0;
  }
}

IndexSpan DistributedSampler::iterate() {
  if (passed_this_epoch_) {
    if (options_.auto_advance_epoch) {
      set_epoch(epoch_ + 1);
    } else if (!warned_repeat_) {
      warned_repeat_ = true;
      warn("DistributedSampler: a second pass over epoch " + std::to_string(epoch_) +
           " without set_epoch() reads the same order again; call set_epoch(e) before each epoch, "
           "or set "
           "auto_advance_epoch");
    }
  }
  passed_this_epoch_ = true;
  position_ = 0;
  return indices();
}

void DistributedSampler::set_position(int64_t rank_samples) {
  if (rank_samples < 0 || rank_samples > num_samples_) {
    throw std::out_of_range("DistributedSampler: position=" + std::to_string(rank_samples) +
                            " out of range [0, num_samples=" + std::to_string(num_samples_) + "]");
  }
  position_ = rank_samples;
}

SamplerState DistributedSampler::state() const {
  // Every rank read its first position_ entries: the first position_ * W
  // positions of the remaining order, which are permutation positions from
  // start on; positions past n are padding, so the epoch is then done.
  int64_t read = 0;
  if (__builtin_mul_overflow(position_, options_.num_replicas, &read)) read = options_.dataset_size;
  return SamplerState::at(options_, epoch_, layout_.start + std::min(read, layout_.remaining()));
}

std::vector<int64_t> DistributedSampler::indices() && {
  return static_cast<const DistributedSampler&>(*this).indices().to_vector();
}

IndexSpan DistributedSampler::indices() const& {
  if (!buffer_ || buffer_->epoch != epoch_) {
    ComputedShard shard = compute_shard(layout_, options_, epoch_,
                                        uses_inside_out(layout_.dataset_size, options_.randperm));
    if (!buffer_) buffer_ = std::make_unique<Buffer>();
    buffer_->epoch = epoch_;
    buffer_->size = shard.size;
    buffer_->data = std::move(shard.data);
  }
  return {buffer_->data.get(), buffer_->size};
}

std::vector<uint32_t> randperm(int64_t n, uint64_t seed, RandpermCompat compat) {
  return detail::reference_randperm(n, seed, uses_inside_out(n, compat));
}

namespace detail {

std::vector<int64_t> shard_indices(const DistributedSamplerOptions& options, int64_t epoch,
                                   bool inside_out) {
  DistributedSampler validated(options);
  const ComputedShard shard = compute_shard(validated.layout(), options, epoch, inside_out);
  return {shard.data.get(), shard.data.get() + shard.size};
}

std::vector<uint32_t> reference_randperm(int64_t n, uint64_t seed, bool inside_out) {
  ShardLayout::make(n, 1, PartitionMode::kPad);  // validates n
  std::vector<uint32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  std::mt19937 eng(static_cast<uint32_t>(seed));
  if (!inside_out) {
    for (int64_t i = 0; i + 1 < n; ++i) {
      const int64_t z = draw32(eng) % static_cast<uint32_t>(n - i);
      std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(i + z)]);
    }
  } else {
    shuffle_inside_out(p.data(), n, eng);
  }
  return p;
}

}  // namespace detail

std::vector<int64_t> global_order(const ShardLayout& layout, bool shuffle, uint64_t seed,
                                  int64_t epoch, RandpermCompat compat) {
  const int64_t n = layout.dataset_size;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  if (shuffle) {
    const auto p = randperm(n, epoch_seed(seed, epoch), compat);
    std::copy(p.begin(), p.end(), perm.begin());
  } else {
    for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  }
  // torch: indices += indices[:pad], or (indices * ceil(pad / n))[:pad]; a
  // resumed remainder perm[start:] is padded the same way.
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(layout.total_size));
  for (int64_t pos = layout.start; pos < layout.start + layout.total_size; ++pos) {
    order.push_back(perm[static_cast<size_t>(pos < n ? pos : (pos - n) % n)]);
  }
  return order;
}

}  // namespace volshard
