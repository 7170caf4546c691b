#pragma once
// Validation during training: Dice over the held-out volumes, split over ranks.

#include <limits>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/options.h"

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

/// Validation Dice (class_dice with options.activation) over `val`, each
/// volume through the run's whole-volume prefix (whole_volume_prefix) and
/// sliding-window inference with options.roi (or crop), overlap and
/// sw_batch_size. Each rank scores its share (assign_validation with
/// options.val_balance); the result equals a single process's exactly, for
/// any world size and either balance. Every rank must call it (two
/// all-reduces).
ValidationScores validation_scores(Model& net, const std::vector<ImageLabelPair>& val,
                                   const TrainOptions& options, Communicator& comm);

/// validation_scores(...).mean.
double validation_dice(Model& net, const std::vector<ImageLabelPair>& val,
                       const TrainOptions& options, Communicator& comm);

}  // namespace volshard
