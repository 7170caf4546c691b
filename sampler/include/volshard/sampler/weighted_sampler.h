#pragma once
// A distributed weighted random sampler whose per-rank draws equal MONAI's
// monai.data.DistributedWeightedRandomSampler (MONAI 1.4) on PyTorch 1.13's CPU
// generator. Standard library only.
//
// MONAI: indices = the rank's DistributedSampler shard; then
//   torch.multinomial(weights of those indices as double, num_samples_per_rank,
//                     replacement=True, generator) and yield indices[k] per draw.
// PyTorch 1.13 draws every num_samples, 1 included, with the cumulative-sum
// inverse-CDF kernel (MultinomialKernel.cpp); that is what is reproduced, bit
// for bit, and checked against Debian's python3-torch 1.13. Newer PyTorch
// releases send num_samples == 1 (with replacement) down the Gumbel fast path
// argmax(w / Exp(1)) instead, so for num_samples_per_rank == 1 the draws here
// equal PyTorch 1.13's, not those releases'. That path is not implemented: no
// oracle for it was at hand, and its exponential_ stream is build-dependent.

#include "volshard/core/mt19937.h"
#include "volshard/sampler/distributed_sampler.h"

#include <cstdint>
#include <vector>

namespace volshard {

namespace detail {
/// DistributedSamplerOptions with shuffle = false: MONAI's default for the
/// weighted sampler (its shards are read in order; randomness comes from the draws).
inline DistributedSamplerOptions unshuffled_sampler_options() {
  DistributedSamplerOptions options;
  options.shuffle = false;
  return options;
}
}  // namespace detail

struct DistributedWeightedSamplerOptions {
  /// The shard each rank draws from. shuffle defaults to false here, as in
  /// MONAI; mode kPad is MONAI's even_divisible=True, kUneven its False.
  DistributedSamplerOptions sampler = detail::unshuffled_sampler_options();
  /// One weight per dataset index (size == sampler.dataset_size); finite,
  /// >= 0, not all zero. Need not sum to 1.
  std::vector<double> weights;
  /// Draws per rank per epoch, >= 0; -1: the rank's shard size (num_samples of
  /// the DistributedSampler), MONAI's default. 0 yields nothing (torch.multinomial
  /// would raise).
  int64_t num_samples_per_rank = -1;
  /// Epoch e draws with a fresh generator seeded (generator_seed + e) mod 2^32.
  uint64_t generator_seed = 0;
};

/// One rank's weighted draws, with replacement, from its DistributedSampler shard.
///
/// Determinism: indices() is a pure function of (options, epoch), so any epoch
/// can be replayed or resumed. Epoch 0 equals MONAI's first epoch with
/// generator=torch.Generator().manual_seed(generator_seed); for later epochs
/// MONAI keeps drawing from the same running generator, whereas here epoch e
/// starts a fresh generator seeded generator_seed + e (MONAI's stream can be
/// replayed with multinomial_with_replacement and one Mt19937 kept across calls).
/// Not thread-safe (the shard is cached lazily, as in DistributedSampler).
class DistributedWeightedSampler {
 public:
  /// Validates here, once: throws std::invalid_argument naming the value.
  explicit DistributedWeightedSampler(DistributedWeightedSamplerOptions options);

  /// Selects both the shard's shuffle and the generator: call it before every epoch.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return shard_.epoch(); }
  /// Draws per epoch: num_samples_per_rank, or the shard size if it was -1.
  int64_t num_samples() const { return num_samples_; }
  const DistributedWeightedSamplerOptions& options() const { return options_; }
  /// The shard the draws come from.
  const DistributedSampler& shard() const { return shard_; }

  /// This rank's num_samples() dataset indices for the current epoch, in draw
  /// order. Recomputed on every call: O(shard size + num_samples * log(shard size)).
  /// Throws std::invalid_argument naming the rank and epoch if every weight in
  /// this epoch's shard is zero (torch.multinomial raises there too).
  std::vector<int64_t> indices() const;

 private:
  DistributedWeightedSamplerOptions options_;
  DistributedSampler shard_;
  int64_t num_samples_ = 0;
};

/// torch.multinomial(torch.tensor(weights, dtype=torch.double), num_samples,
/// replacement=True, generator=gen) on PyTorch 1.13's CPU: the positions drawn,
/// in [0, weights.size()). Advances gen by 2 draws per sample, as torch does,
/// so successive calls on one generator equal successive torch calls.
/// Throws std::invalid_argument naming the value if num_samples < 0, a weight is
/// negative or not finite, or the weights sum to 0 or overflow.
/// (torch also refuses num_samples == 0 and more than 2^24 weights; this does not.)
std::vector<int64_t> multinomial_with_replacement(const std::vector<double>& weights,
                                                  int64_t num_samples, Mt19937& gen);

/// torch's uniform double in [0, 1) from the CPU generator: the low 53 bits of
/// random64() (first 32-bit draw in the high half) times 2^-53.
double uniform_double(Mt19937& gen);

}  // namespace volshard
