#include "volshard/sampler/distributed_sampler.h"

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

uint32_t draw32(std::mt19937& eng) { return static_cast<uint32_t>(eng()); }

// CPUGeneratorImpl::random64: the first 32-bit draw is the high half.
uint64_t draw64(std::mt19937& eng) {
  const uint64_t hi = draw32(eng);
  const uint64_t lo = draw32(eng);
  return (hi << 32) | lo;
}

// Inside-out Fisher-Yates over p[0, n), exactly torch's branch for large n:
// r[i] = r[z]; r[z] = i. Needs no initialised buffer (z == i reads nothing).
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
    const auto wrapped = static_cast<size_t>((cur.next - static_cast<uint64_t>(n)) %
                                             static_cast<uint64_t>(n));
    out[k++] = head[wrapped];
  }
  return k;
}

// One rank's shard of a shuffled epoch in one pass of the forward Fisher-Yates.
// After step i, p[i] is final and never read again, so the rank's entries are
// compacted into the front of the same buffer as they become final.
// Each step is a random access into the n-sized buffer (latency-bound once it
// outgrows the caches); the swap targets depend only on the generator, so they
// are drawn kAhead steps early and prefetched to keep many misses in flight.
int64_t shard_forward_fisher_yates(uint32_t* p, int64_t n, std::mt19937& eng, RankCursor& cur,
                                   std::vector<uint32_t>& head) {
  constexpr int64_t kAhead = 32;
  constexpr int64_t kRing = 64;  // power of two > kAhead
  uint32_t target[kRing];
  const int64_t steps = n - 1;  // the last position needs no draw
  const auto draw_target = [&](int64_t i) {
    const uint32_t z = draw32(eng) % static_cast<uint32_t>(n - i);
    target[i & (kRing - 1)] = static_cast<uint32_t>(i) + z;
    __builtin_prefetch(p + static_cast<int64_t>(i) + z, 1, 3);
  };
  for (int64_t i = 0; i < std::min(kAhead, steps); ++i) draw_target(i);

  const auto head_len = static_cast<int64_t>(head.size());
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i < steps) {
      if (i + kAhead < steps) draw_target(i + kAhead);
      const uint32_t j = target[i & (kRing - 1)];
      std::swap(p[i], p[j]);
    }
    if (i < head_len) head[static_cast<size_t>(i)] = p[i];
    if (cur.takes(i)) {
      p[k++] = p[i];
      cur.next += cur.step;
    }
  }
  return k;
}

void put_field(std::ostringstream& os, const char* name, int64_t value) { os << name << '=' << value; }

}  // namespace

std::string to_string(PartitionMode mode) {
  switch (mode) {
    case PartitionMode::kPad: return "pad";
    case PartitionMode::kDropLast: return "drop_last";
    case PartitionMode::kUneven: return "uneven";
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

uint32_t epoch_seed(uint64_t seed, int64_t epoch) {
  // Python computes seed + epoch exactly and the generator keeps the low 32
  // bits; unsigned wrap-around gives the same low bits.
  return static_cast<uint32_t>(seed + static_cast<uint64_t>(epoch));
}

ShardLayout ShardLayout::make(int64_t dataset_size, int64_t num_replicas, PartitionMode mode) {
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
  if (mode == PartitionMode::kUneven && dataset_size < num_replicas) {
    fail("mode=uneven needs dataset_size=" + std::to_string(dataset_size) +
         " >= num_replicas=" + std::to_string(num_replicas) +
         " (MONAI's even_divisible=False refuses fewer samples than ranks)");
  }
  ShardLayout layout;
  layout.dataset_size = dataset_size;
  layout.num_replicas = num_replicas;
  layout.mode = mode;
  const int64_t floor_q = dataset_size / num_replicas;
  const bool exact = dataset_size % num_replicas == 0;
  switch (mode) {
    case PartitionMode::kPad: {
      const int64_t ceil_q = floor_q + (exact ? 0 : 1);
      if (__builtin_mul_overflow(ceil_q, num_replicas, &layout.total_size)) {
        fail("arithmetic overflow: ceil(dataset_size=" + std::to_string(dataset_size) +
             " / num_replicas=" + std::to_string(num_replicas) + ") * num_replicas exceeds int64");
      }
      break;
    }
    case PartitionMode::kDropLast:
      // torch: ceil((n - W) / W) when n % W != 0, which is floor(n / W).
      layout.total_size = floor_q * num_replicas;
      break;
    case PartitionMode::kUneven:
      layout.total_size = dataset_size;
      break;
  }
  return layout;
}

int64_t ShardLayout::num_samples(int64_t rank) const {
  if (mode != PartitionMode::kUneven) return total_size / num_replicas;
  const int64_t base = dataset_size / num_replicas;
  return base + (rank < dataset_size % num_replicas ? 1 : 0);
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
    fail("rank=" + std::to_string(options.rank) + " must be in [0, num_replicas=" +
         std::to_string(options.num_replicas) + ")");
  }
  num_samples_ = layout_.num_samples(options.rank);
}

DistributedSampler::~DistributedSampler() = default;
DistributedSampler::DistributedSampler(DistributedSampler&&) noexcept = default;
DistributedSampler& DistributedSampler::operator=(DistributedSampler&&) noexcept = default;

void DistributedSampler::set_epoch(int64_t epoch) { epoch_ = epoch; }

IndexSpan DistributedSampler::indices() const {
  if (buffer_ && buffer_->epoch == epoch_) return {buffer_->data.get(), buffer_->size};

  const int64_t n = layout_.dataset_size;
  const int64_t total = layout_.total_size;
  RankCursor cur{static_cast<uint64_t>(options_.rank), static_cast<uint64_t>(layout_.num_replicas),
                 static_cast<uint64_t>(total)};
  // Padding repeats the permutation from its start: keep its first entries.
  const int64_t pad = std::max<int64_t>(total - n, 0);
  std::vector<uint32_t> head(static_cast<size_t>(std::min(pad, n)));

  OwnedIndices data;
  int64_t k = 0;
  if (!options_.shuffle) {
    data = allocate_indices(num_samples_);
    uint32_t* out = data.get();
    for (; cur.next < cur.end && cur.next < static_cast<uint64_t>(n); cur.next += cur.step) {
      out[k++] = static_cast<uint32_t>(cur.next);
    }
    for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<uint32_t>(i);
  } else {
    data = allocate_indices(n);
    uint32_t* p = data.get();
    std::mt19937 eng(epoch_seed(options_.seed, epoch_));
    if (!uses_inside_out(n, options_.randperm)) {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint32_t>(i);
      k = shard_forward_fisher_yates(p, n, eng, cur, head);
    } else {
      shuffle_inside_out(p, n, eng);
      std::copy(p, p + head.size(), head.begin());
      for (; cur.next < cur.end && cur.next < static_cast<uint64_t>(n); cur.next += cur.step) {
        p[k++] = p[static_cast<int64_t>(cur.next)];
      }
    }
  }
  if (n > 0) k = append_padding(data.get(), k, cur, n, head);
  shrink(data, k);

  if (!buffer_) buffer_ = std::make_unique<Buffer>();
  buffer_->epoch = epoch_;
  buffer_->size = k;
  buffer_->data = std::move(data);
  return {buffer_->data.get(), buffer_->size};
}

std::vector<uint32_t> randperm(int64_t n, uint64_t seed, RandpermCompat compat) {
  ShardLayout::make(n, 1, PartitionMode::kPad);  // validates n
  std::vector<uint32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  std::mt19937 eng(static_cast<uint32_t>(seed));
  if (!uses_inside_out(n, compat)) {
    for (int64_t i = 0; i + 1 < n; ++i) {
      const int64_t z = draw32(eng) % static_cast<uint32_t>(n - i);
      std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(i + z)]);
    }
  } else {
    shuffle_inside_out(p.data(), n, eng);
  }
  return p;
}

std::vector<int64_t> global_order(const ShardLayout& layout, bool shuffle, uint64_t seed,
                                  int64_t epoch, RandpermCompat compat) {
  const int64_t n = layout.dataset_size;
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (shuffle) {
    const auto perm = randperm(n, epoch_seed(seed, epoch), compat);
    std::copy(perm.begin(), perm.end(), order.begin());
  } else {
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  }
  if (layout.total_size <= n) {
    order.resize(static_cast<size_t>(layout.total_size));
  } else {
    // torch: indices += indices[:pad], or (indices * ceil(pad / n))[:pad].
    for (int64_t pos = n; pos < layout.total_size; ++pos) {
      order.push_back(order[static_cast<size_t>((pos - n) % n)]);
    }
  }
  return order;
}

}  // namespace volshard
