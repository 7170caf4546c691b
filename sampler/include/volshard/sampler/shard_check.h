#pragma once
// Checks that an epoch's shards are what PyTorch's sampler would give and
// that they partition the dataset as the mode promises. Used by
// `sampler-inspect --verify`; O(total_size) memory.

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/sampler/distributed_sampler.h"

namespace volshard {

/// Every rank's indices for one epoch, each computed by its own sampler;
/// with start > 0, what is left of the epoch after start permutation
/// positions were consumed (see ShardLayout). options.rank is ignored.
std::vector<std::vector<int64_t>> all_shards(const DistributedSamplerOptions& options,
                                             int64_t epoch, int64_t start = 0);

/// Samples of [0, n) whose owner (the lowest rank holding it, or none)
/// differs between two epochs' shards.
int64_t count_changed_owner(int64_t n, const std::vector<std::vector<int64_t>>& before,
                            const std::vector<std::vector<int64_t>>& now);

struct EpochCheck {
  int64_t epoch = 0;
  std::vector<std::string> failures;  ///< empty when every check passed
  int64_t padded = 0;                 ///< positions repeated to pad (kPad)
  int64_t dropped = 0;                ///< samples left out this epoch (kDropLast)
  /// Samples whose owner (the lowest rank holding it) differs from the
  /// previous epoch's; -1 if there is no previous epoch.
  int64_t changed_rank = -1;
  bool ok() const { return failures.empty(); }
};

/// Checks one epoch's shards (as all_shards returns them) against the
/// reference global order and the mode's partition rule, that recomputing the
/// epoch reproduces them, and, when `previous` is given, that a shuffled
/// dataset of n >= 8 changed order and how many samples changed rank.
/// With start > 0 the shards are a resumed remainder: the rule then holds for
/// the consumed permutation positions [0, start) and the shards together
/// (no sample skipped; none repeated except by padding).
EpochCheck check_epoch(const DistributedSamplerOptions& options, int64_t epoch,
                       const std::vector<std::vector<int64_t>>& shards,
                       const std::vector<std::vector<int64_t>>* previous, int64_t start = 0);

}  // namespace volshard
