#include "volshard/trainer/rank_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "volshard/sampler/batching.h"
#include "volshard/trainer/device.h"

namespace volshard {

RankPlan RankPlan::make(const TrainOptions& o, int64_t rank, int64_t world) {
  o.validate();  // before any value is read: roi and crop have one edge or three
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("train: rank " + std::to_string(rank) + " of a world of " +
                                std::to_string(world) + " ranks: must be in [0, world)");
  RankPlan p;
  p.rank = rank;
  p.world = world;
  p.device = resolve_device(o.device, o.local_rank);
  p.cache_device = resolve_cache_device(o.cache_device, p.device);
  p.backend = backend_for(o.backend, p.device, o.local_world_size);
  // --invariant: kernels split their sums by thread, so the count is fixed.
  const int64_t local_world = std::max<int64_t>(1, o.local_world_size);
  p.threads =
      o.threads > 0 ? o.threads
      : o.invariant
          ? 1
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::thread::hardware_concurrency()) / local_world);
  p.mode = o.invariant    ? StepMode::kInvariant
           : o.cuda_graph ? StepMode::kGraphed
                          : StepMode::kBatched;
  p.batch_size_ = o.batch_size;
  p.accumulate_ = o.accumulate;
  p.loader_batch = o.invariant ? 1 : o.batch_size;
  p.val_window = o.val_window();
  p.seeds = SeedStreams(o.seed);
  p.read_every_step = o.invariant || o.fingerprints;
  return p;
}

int64_t RankPlan::steps_per_epoch(int64_t train_size) const {
  // A whole epoch's order on this rank: every rank's shard is as long under
  // DistributedSampler's padding.
  return steps_in(
      ShardLayout::make(train_size, order_world(), PartitionMode::kPad).num_samples(order_rank()));
}

DistributedSamplerOptions RankPlan::sampler(int64_t train_size) const {
  DistributedSamplerOptions so;
  so.dataset_size = train_size;
  so.num_replicas = order_world();
  so.rank = order_rank();
  so.shuffle = true;
  so.seed = seeds.base_seed();
  so.mode = PartitionMode::kPad;
  return so;
}

int64_t RankPlan::steps_in(int64_t order_length) const {
  // The sampler's batches (the last one short), `accumulate` to a step
  // (--invariant: one, as validate() insists; its batches are global).
  const int64_t batches = volshard::steps_per_epoch(order_length, batch_size_, false);
  return (batches + accumulate_ - 1) / accumulate_;
}

DealtEpoch RankPlan::deal(const std::vector<int64_t>& order) const {
  const auto total = static_cast<int64_t>(order.size());
  DealtEpoch out;
  if (mode == StepMode::kInvariant) {
    for (int64_t start = 0; start < total; start += batch_size_) {
      const int64_t count = std::min(batch_size_, total - start);
      int64_t taken = 0;
      for (int64_t k = rank; k < count; k += world, ++taken)
        out.indices.push_back(order[static_cast<size_t>(start + k)]);
      out.steps.push_back({taken, count});
    }
  } else {
    for (int64_t left = volshard::steps_per_epoch(total, batch_size_, false); left > 0;) {
      const int64_t m = std::min(accumulate_, left);
      out.steps.push_back({m, m * batch_size_ * world});
      left -= m;
    }
    out.indices = order;
  }
  return out;
}

}  // namespace volshard
