#pragma once
// What one training rank runs with, resolved once from its options and its
// place (rank, world, the machine it is on): the device, where the cache and
// the augmentation live, the collective backend, the intra-op threads, how
// the sampler's order is dealt into optimizer steps (--batch-size,
// --accumulate, --invariant), validation's window and the seed streams.
// train's launcher, the engine, the start line and repro read it; nothing
// else derives any of these.

#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "volshard/core/seed_streams.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/options.h"

namespace volshard {

/// How an optimizer step turns its batches into gradients.
enum class StepMode {
  kBatched,    ///< a forward and backward per loader batch; --accumulate N sums N of them
  kInvariant,  ///< --invariant: a forward per volume, each gradient apart, their mean exact
  kGraphed,    ///< --cuda-graph: one batch, the whole step replayed from static buffers
};

/// One optimizer step of an epoch: this rank's loader batches in it, and the
/// positions of the epoch's order that all ranks take in it.
struct StepShare {
  int64_t batches = 0;
  int64_t positions = 0;
  bool operator==(const StepShare& o) const {
    return batches == o.batches && positions == o.positions;
  }
};

/// An epoch's order dealt to one rank: its indices in loader order, and its steps.
struct DealtEpoch {
  std::vector<int64_t> indices;
  std::vector<StepShare> steps;
};

struct RankPlan {
  int64_t rank = 0;
  int64_t world = 1;
  c10::Device device = c10::kCPU;           ///< --device: the network, its batches, the loss
  std::optional<c10::Device> cache_device;  ///< --cache-device: nullopt for host memory
  Backend backend = Backend::kGloo;         ///< --backend resolved for the device and local ranks
  int64_t threads = 1;                      ///< intra-op threads of this rank
  StepMode mode = StepMode::kBatched;
  /// The loader's batch: --batch-size, or one volume under --invariant.
  int64_t loader_batch = 1;
  /// Validation's sliding window (TrainOptions::val_window).
  std::array<int64_t, 3> val_window{0, 0, 0};
  SeedStreams seeds{0};
  /// Whether every step's values are read and agreed as it ends (--invariant's
  /// exact loss, --fingerprints' per-step line) rather than every --log-every.
  bool read_every_step = false;

  /// The plan of rank `rank` of `world` from `options` and this machine:
  /// options.local_rank and local_world_size pick the GPU and share the
  /// cores. Made before the process group (it picks the backend) and the
  /// data. Throws std::invalid_argument naming the flag where the options are
  /// invalid (TrainOptions::validate) or the device, the cache device or the
  /// backend cannot run here.
  static RankPlan make(const TrainOptions& options, int64_t rank, int64_t world);

  /// The sampler of this rank's order over `train_size` volumes: the ranks'
  /// shards, or under --invariant one global order that deal() splits step
  /// by step.
  DistributedSamplerOptions sampler(int64_t train_size) const;
  /// Optimizer steps of a whole epoch over `train_size` volumes, the same on every rank.
  int64_t steps_per_epoch(int64_t train_size) const;
  /// The rank and world the sampler's order is taken as (0 of 1 under --invariant).
  int64_t order_rank() const { return mode == StepMode::kInvariant ? 0 : rank; }
  int64_t order_world() const { return mode == StepMode::kInvariant ? 1 : world; }

  /// `order` (this rank's sampler indices for an epoch, whole or the rest of
  /// it after a resume) dealt into optimizer steps. Batched: batches of
  /// loader_batch, `accumulate` of them a step (fewer at the end). Invariant:
  /// step t takes positions [tB, (t + 1)B) of the global order, its k-th
  /// volume to rank k mod world, so each step's volumes do not depend on the
  /// world size.
  DealtEpoch deal(const std::vector<int64_t>& order) const;

  /// The seed of dropout's masks for micro-batch `micro` of the step after
  /// `steps_done` (SeedStreams::dropout_seed of this rank).
  uint64_t dropout_seed(int64_t steps_done, int64_t micro) const {
    return seeds.dropout_seed(rank, steps_done, micro);
  }

 private:
  int64_t batch_size_ = 1;  ///< --batch-size: a rank's, or the global batch under --invariant
  int64_t accumulate_ = 1;
  /// Optimizer steps that `order_length` positions of this rank's order make.
  int64_t steps_in(int64_t order_length) const;
};

}  // namespace volshard
