#pragma once
// One base seed, split into named streams by a documented, stable mixing
// function, so that "same seed, same run" holds across ranks, loader threads,
// restarts and world sizes. Standard library only.
//
// derive_seed(base, stream, epoch, id) =
//   h0 = mix64(base + G); h1 = mix64((h0 ^ stream) + G);
//   h2 = mix64((h1 ^ epoch) + G); return mix64((h2 ^ id) + G)
// where G = 0x9e3779b97f4a7c15 and mix64 is SplitMix64's output function
// (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
// z ^= z >> 31). Fields are taken as uint64 (two's complement for negatives).
// It never uses std::hash or a standard distribution, so it is the same on
// every platform and standard library.

#include <cstdint>

namespace volshard {

/// SplitMix64's output function: a bijection on uint64 with good avalanche.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

/// The seed PyTorch hands to the generator for an epoch: (seed + epoch) mod 2^32.
/// Python computes seed + epoch exactly and the generator keeps the low 32
/// bits; unsigned wrap-around gives the same low bits.
constexpr uint32_t epoch_seed(uint64_t seed, int64_t epoch) {
  return static_cast<uint32_t>(seed + static_cast<uint64_t>(epoch));
}

enum class Stream : uint64_t {
  kShared = 1,  ///< identical on every rank (model initialisation, shared draws)
  kRank = 2,    ///< distinct per rank (dropout masks, anything rank-local)
  kSample = 3,  ///< per dataset index: augmentation, whoever processes it
  kWorker = 4,  ///< per data loader worker process of a rank (PyTorch's worker_init_fn)
};

/// The stable mixing function above.
uint64_t derive_seed(uint64_t base_seed, Stream stream, uint64_t epoch, uint64_t id);

/// A small deterministic generator: SplitMix64 over a derived seed. Its draws
/// depend only on the seed, never on threads or a global generator.
class StreamRng {
 public:
  explicit StreamRng(uint64_t seed) : state_(seed) {}
  /// The next 64 uniformly random bits.
  uint64_t next_u64() {
    state_ += kGoldenGamma;
    return mix64(state_);
  }
  /// Uniform in [0, bound), without modulo bias (Lemire's multiply-and-reject).
  /// Throws std::invalid_argument if bound == 0.
  uint64_t below(uint64_t bound);
  /// Uniform in [lo, hi], inclusive; throws std::invalid_argument if lo > hi.
  int64_t uniform_int(int64_t lo, int64_t hi);
  /// Uniform in [0, 1) with 53 random bits.
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  /// True with probability p; throws std::invalid_argument unless 0 <= p <= 1.
  bool bernoulli(double p);

 private:
  uint64_t state_;
};

/// Purposes of shared draws (the `purpose` of SeedStreams::shared_seed).
namespace purpose {
constexpr uint64_t kModelInit = 0;
constexpr uint64_t kWeightedDraw = 1;
}  // namespace purpose

/// The streams of one run, from one base seed.
class SeedStreams {
 public:
  explicit SeedStreams(uint64_t base_seed) : base_(base_seed) {}
  uint64_t base_seed() const { return base_; }

  /// The sampler's permutation seed, exactly PyTorch's: (seed + epoch) mod 2^32.
  uint32_t permutation_seed(int64_t epoch) const { return epoch_seed(base_, epoch); }
  /// Same on every rank: model initialisation (epoch 0) and other shared draws.
  uint64_t shared_seed(uint64_t purpose, int64_t epoch = 0) const;
  /// Distinct per rank, reproducible.
  uint64_t rank_seed(int64_t rank, int64_t epoch) const;
  /// The augmentation seed of dataset index i in epoch e: the same whichever
  /// rank or loader thread processes it and however many there are.
  uint64_t sample_seed(int64_t index, int64_t epoch) const;
  /// Distinct per (rank, worker process), reproducible: the rank's stream
  /// split by worker, derive_seed(rank_seed(rank, epoch), kWorker, epoch, worker).
  uint64_t worker_seed(int64_t rank, int64_t worker, int64_t epoch) const;
  /// Dropout masks of optimizer step `step` (the steps done before it) and its
  /// micro-batch `micro` on `rank`: the rank's stream of that step split by
  /// micro-batch, derive_seed(rank_seed(rank, step), kRank, step, micro). A
  /// rerun and a resumed run draw the same masks, with nothing to checkpoint.
  uint64_t dropout_seed(int64_t rank, int64_t step, int64_t micro) const;

  StreamRng shared(uint64_t purpose, int64_t epoch = 0) const {
    return StreamRng(shared_seed(purpose, epoch));
  }
  StreamRng rank(int64_t rank, int64_t epoch) const { return StreamRng(rank_seed(rank, epoch)); }
  StreamRng sample(int64_t index, int64_t epoch) const {
    return StreamRng(sample_seed(index, epoch));
  }

 private:
  uint64_t base_;
};

}  // namespace volshard
