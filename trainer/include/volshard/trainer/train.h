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
#include "volshard/trainer/unet.h"

namespace volshard {

struct TrainOptions {
  // Data
  std::string data_dir;  ///< img*/seg* pairs (see image_glob, label_glob)
  std::string datalist;  ///< or a MONAI/Decathlon JSON datalist ("training", "validation")
  std::string image_glob = "img*";
  std::string label_glob = "seg*";
  double val_fraction =
      0.2;  ///< --data only: the last fraction of pairs validates (at least 1 when > 0)
  double cache_rate = 1.0;  ///< fraction of training volumes whose prepared prefix stays in memory
  std::string
      cache_dir;  ///< also persist the prepared prefix here (keyed by file contents): warm restarts
  int64_t workers = 2;  ///< loader threads per rank
  // Output
  std::string out_dir;  ///< RUN folder
  // Schedule
  int64_t epochs = 5;
  int64_t batch_size = 2;      ///< volumes per rank and step
  int64_t crop = 96;           ///< RandCropByPosNegLabel spatial size (cubic)
  int64_t num_samples = 4;     ///< crops per volume
  bool allow_smaller = false;  ///< crops larger than a volume shrink instead of failing
  double rot90_prob = 0.5;
  std::string optimizer = "adam";  ///< adam | sgd
  double lr = 1e-3;
  double momentum = 0.9;  ///< sgd
  double weight_decay = 0.0;
  std::string lr_schedule = "constant";  ///< constant | cosine | poly (power 0.9), per step
  uint64_t seed = 0;
  UNetOptions model;
  // Validation
  int64_t val_every = 1;  ///< epochs; 0: never
  int64_t roi = 0;        ///< sliding-window size for validation; 0: the crop size
  double overlap = 0.25;
  // Checkpoints and faults
  int64_t checkpoint_every = 0;  ///< also every k steps (mid-epoch); 0: at epoch ends only
  std::string resume;            ///< RUN folder (or checkpoint file) to continue from
  std::string init_weights;      ///< state_dict .pt saved by Python/MONAI
  std::string trace_samples;  ///< JSON lines of every sample fed (epoch, step, rank, index, crops,
                              ///< rotation)
  int64_t max_steps = -1;  ///< stop (with a checkpoint) after this many global steps; -1: no limit
  double timeout_s = 120;  ///< a collective waiting longer for a peer fails
  // Machine
  int64_t threads = 0;           ///< intra-op threads per rank; 0: cores / local world size
  std::string backend = "gloo";  ///< gloo | nccl
  bool deterministic = true;     ///< at::globalContext().setDeterministicAlgorithms
  int64_t local_world_size = 1;  ///< ranks on this machine (from the launcher; not saved)

  /// Throws std::invalid_argument naming the field (values only; no files).
  void validate() const;
  std::string to_json() const;
  /// Fields present in `json` override this; unknown keys are an error naming them.
  void merge_json(const std::string& json, const std::string& source);
};

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

struct PredictOptions {
  std::string model_path;  ///< state_dict .pt (ours or MONAI's)
  std::string image_path;
  std::string out_path;
  std::string output = "label";  ///< logits | prob | label
  int64_t roi = 0;               ///< 0: whole volume; else sliding window of this size
  double overlap = 0.25;
  UNetOptions model;
  void validate() const;
};

/// Reads the image, scales its intensity as in training, runs the UNet and
/// writes a float32 (logits, prob) or uint8 (label) NIfTI with the input's
/// affine. Throws std::runtime_error naming the file.
void predict(const PredictOptions& options);

}  // namespace volshard
