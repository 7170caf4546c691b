#pragma once
// Validation during training: Dice over the held-out volumes, split over ranks.

#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/options.h"
#include "volshard/trainer/unet.h"

namespace volshard {

/// Mean validation Dice (MONAI's DiceMetric on sigmoid > 0.5, empty labels
/// skipped) over `val`, sliding-window inference with options.roi (or crop)
/// and options.overlap. Each rank scores its part of an uneven, unshuffled
/// split; the result equals a single process's exactly, for any world size.
/// Every rank must call it (one all-reduce). NaN when nothing was scored.
double validation_dice(UNet& net, const std::vector<ImageLabelPair>& val,
                       const TrainOptions& options, Communicator& comm);

}  // namespace volshard
