#pragma once
// Validation during training: Dice over the held-out volumes, split over ranks.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "volshard/datasets/cache.h"
#include "volshard/datasets/datalist.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/options.h"
#include "volshard/trainer/rank_plan.h"

namespace volshard {

struct ValidationScores {
  /// MONAI's DiceMetric(reduction "mean"): the mean over every (volume,
  /// class) whose label is not empty; NaN when there is none.
  double mean = std::numeric_limits<double>::quiet_NaN();
  /// Per class (MONAI's "mean_batch"): sigmoid, every output channel;
  /// softmax, classes 1..C-1. NaN for a class empty in every volume.
  std::vector<double> per_class;
  /// Seconds each rank spent on its share (loading, inference, scoring), by
  /// rank: the slowest sets the wall time, the others wait for it.
  std::vector<double> rank_seconds;
};

/// One rank's validation volumes after the whole-volume prefix, kept from one
/// validation to the next as MONAI's tutorials keep theirs (a CacheDataset of
/// the validation set): the first validation prepares the rank's share, in
/// parallel, and keeps the first cache_rate of it where `options` say (host
/// memory, or the GPU with CacheOptions::device); the rest is read and
/// prepared again at each validation, as without a cache.
class ValidationCache {
 public:
  explicit ValidationCache(CacheOptions options);
  /// This rank's share of the validation volumes: `assign()` at the first
  /// call (which reads each volume's header for its cost), then the same.
  const std::vector<int64_t>& share(const std::function<std::vector<int64_t>()>& assign);
  /// Volume `index` of the share: kept, or made by `prepare` (the first call
  /// prepares those it keeps, in parallel). Not for concurrent calls.
  Sample get(int64_t index, const SampleSource& prepare);
  /// Volumes held (0 before the first validation).
  int64_t cached_items() const;

 private:
  CacheOptions options_;
  std::optional<std::vector<int64_t>> share_;
  std::vector<int64_t> position_;  ///< by dataset index: its place in the share, or -1
  SampleSource prepare_;           ///< the current call's
  std::unique_ptr<SampleCache> cache_;
};

/// Validation Dice (class_dice with options.activation) over `val`, each
/// volume through the run's whole-volume prefix (whole_volume_prefix) and
/// sliding-window inference with the plan's window (plan.val_window), overlap
/// and sw_batch_size. Rank plan.rank of plan.world scores its share
/// (assign_validation with options.val_balance); the result equals a single
/// process's exactly, for any world size and either balance. Every rank must call it (two
/// all-reduces). With a `cache`, the volumes come from it (the same values).
/// The windows' logits stay on the network's device, where they are blended
/// and scored.
ValidationScores validation_scores(Model& net, const std::vector<ImageLabelPair>& val,
                                   const TrainOptions& options, const RankPlan& plan,
                                   Communicator& comm, ValidationCache* cache = nullptr);

/// validation_scores(...).mean.
double validation_dice(Model& net, const std::vector<ImageLabelPair>& val,
                       const TrainOptions& options, const RankPlan& plan, Communicator& comm);

}  // namespace volshard
