#pragma once
// Per-rank batches over a sampler's indices, and step counts every rank can
// compute without communication.

#include <cstdint>

#include "volshard/sampler/distributed_sampler.h"

namespace volshard {

/// Batches of one rank's indices, in order. The last batch is short unless
/// drop_last_batch, which drops it (as torch's BatchSampler(drop_last=True)).
class BatchView {
 public:
  /// Throws std::invalid_argument if batch_size < 1.
  BatchView(IndexSpan indices, int64_t batch_size, bool drop_last_batch);
  int64_t num_batches() const { return num_batches_; }
  int64_t batch_size() const { return batch_size_; }
  /// Batch b in [0, num_batches()); throws std::out_of_range naming b.
  IndexSpan batch(int64_t b) const;

 private:
  IndexSpan indices_;
  int64_t batch_size_;
  int64_t num_batches_;
};

/// Steps an epoch of num_samples takes at batch_size.
int64_t steps_per_epoch(int64_t num_samples, int64_t batch_size, bool drop_last_batch);

/// The largest steps_per_epoch over all ranks of a layout: a function of
/// (n, W, mode, batch) only, so every rank knows it without communicating and
/// can keep taking part in collectives after its own shard runs out (kUneven).
int64_t max_steps_per_epoch(const ShardLayout& layout, int64_t batch_size, bool drop_last_batch);

}  // namespace volshard
