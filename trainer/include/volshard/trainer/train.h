#pragma once
// The training job: MONAI's DDP UNet tutorial, in C++, on this project's
// sampler, cache, transforms and loader. One call per rank.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "volshard/datasets/datalist.h"
#include "volshard/sampler/distributed_sampler.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/options.h"
#include "volshard/trainer/unet.h"

namespace volshard {

/// Checks what can be checked before any worker starts, for `world_size`
/// ranks: values, the data (pairs exist, headers readable, image and label
/// shapes agree), the crop against the volumes (unless allow_smaller), the
/// crop and ROI against the UNet's stride product, world size against the
/// validation set. Throws std::invalid_argument with one message naming the
/// file or value.
void check_training_config(const TrainOptions& options, int64_t world_size);

/// Training volumes the options select (after the validation hold-out).
int64_t training_set_size(const TrainOptions& options);

struct TrainSummary {
  int64_t epochs_done = 0;
  int64_t global_step = 0;
  double last_loss = 0;
  double last_val_dice = -1;  ///< -1: no validation ran
  bool interrupted = false;   ///< stopped by a signal (checkpoint written)
};

/// Runs (or resumes) training on this rank. Rank 0 writes RUN/: model.pt,
/// checkpoint.pt, metrics.jsonl, config.json and curves.png; every rank takes
/// part in every collective. `stop_requested` is polled between steps (e.g.
/// set by SIGTERM): the ranks agree on it, finish the step, write a checkpoint
/// and return with interrupted = true.
TrainSummary train(const TrainOptions& options, Communicator& comm,
                   const std::function<bool()>& stop_requested = {});

/// Mean validation Dice (MONAI's DiceMetric on sigmoid > 0.5, empty labels
/// skipped) over `val`, sliding-window inference with options.roi (or crop)
/// and options.overlap. Each rank scores its part of an uneven, unshuffled
/// split; the result equals a single process's exactly, for any world size.
/// Every rank must call it (one all-reduce). NaN when nothing was scored.
double validation_dice(UNet& net, const std::vector<ImageLabelPair>& val,
                       const TrainOptions& options, Communicator& comm);

/// Reads the image, scales its intensity as in training, runs the UNet and
/// writes a float32 (logits, prob) or uint8 (label) NIfTI with the input's
/// affine. Throws std::runtime_error naming the file.
void predict(const PredictOptions& options);

}  // namespace volshard
