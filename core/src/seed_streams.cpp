#include "volshard/core/seed_streams.h"

#include <stdexcept>
#include <string>

namespace volshard {

uint64_t derive_seed(uint64_t base_seed, Stream stream, uint64_t epoch, uint64_t id) {
  uint64_t h = mix64(base_seed + kGoldenGamma);
  h = mix64((h ^ static_cast<uint64_t>(stream)) + kGoldenGamma);
  h = mix64((h ^ epoch) + kGoldenGamma);
  return mix64((h ^ id) + kGoldenGamma);
}

uint64_t StreamRng::below(uint64_t bound) {
  if (bound == 0) throw std::invalid_argument("StreamRng::below: bound=0 must be >= 1");
  // Lemire (2019): the high word of x * bound is uniform once the low word
  // clears the threshold 2^64 mod bound.
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * bound;
  auto low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

int64_t StreamRng::uniform_int(int64_t lo, int64_t hi) {
  if (lo > hi) {
    throw std::invalid_argument("StreamRng::uniform_int: lo=" + std::to_string(lo) +
                                " must be <= hi=" + std::to_string(hi));
  }
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);  // hi - lo, mod 2^64
  const uint64_t offset = span == ~uint64_t{0} ? next_u64() : below(span + 1);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + offset);
}

bool StreamRng::bernoulli(double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument("StreamRng::bernoulli: p=" + std::to_string(p) +
                                " must be in [0, 1]");
  }
  return uniform_double() < p;
}

uint64_t SeedStreams::shared_seed(uint64_t purpose, int64_t epoch) const {
  return derive_seed(base_, Stream::kShared, static_cast<uint64_t>(epoch), purpose);
}

uint64_t SeedStreams::rank_seed(int64_t rank, int64_t epoch) const {
  return derive_seed(base_, Stream::kRank, static_cast<uint64_t>(epoch),
                     static_cast<uint64_t>(rank));
}

uint64_t SeedStreams::worker_seed(int64_t rank, int64_t worker, int64_t epoch) const {
  return derive_seed(rank_seed(rank, epoch), Stream::kWorker, static_cast<uint64_t>(epoch),
                     static_cast<uint64_t>(worker));
}

uint64_t SeedStreams::dropout_seed(int64_t rank, int64_t step, int64_t micro) const {
  return derive_seed(rank_seed(rank, step), Stream::kRank, static_cast<uint64_t>(step),
                     static_cast<uint64_t>(micro));
}

uint64_t SeedStreams::sample_seed(int64_t index, int64_t epoch) const {
  return derive_seed(base_, Stream::kSample, static_cast<uint64_t>(epoch),
                     static_cast<uint64_t>(index));
}

}  // namespace volshard
