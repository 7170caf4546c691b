#pragma once
// RUN/, the folder a training run writes: config.json, metrics.jsonl,
// curves.png and model.pt by rank 0 (checkpoint.pt: see resume.h), and the
// --trace-samples file every rank appends to.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/resume.h"
#include "volshard/core/file_io.h"
#include "volshard/core/png.h"
#include "volshard/datasets/loader.h"
#include "volshard/trainer/comm.h"
#include "volshard/trainer/model.h"
#include "volshard/trainer/options.h"

namespace volshard {

/// Creates `dir` (and its parents) and removes the temporary files of writes
/// that were killed half-way (the files they were to replace are intact).
/// Throws std::runtime_error naming `dir`.
void create_run_folder(const std::string& dir);

/// curves.png from metrics.jsonl's text: the training Dice loss of every step
/// (light) and its mean per epoch, validation Dice per epoch, on 0..1 against
/// the global step, with ticks on both axes and a grey line at each epoch's
/// end.
Canvas draw_curves(const std::string& metrics_jsonl);

/// What metrics.jsonl's "step" and "epoch" lines both hold; for an epoch, the
/// loss is its mean and the rates are over its steps.
struct MetricsLine {
  int64_t epoch = 0, step = 0;
  double loss = 0, lr = 0, samples_per_s = 0, data_wait = 0;
  /// --amp fp16 (step lines): the loss scale the step used, and whether its
  /// gradients held an inf or nan, so the optimizer skipped it.
  double loss_scale = 0;  ///< 0: no GradScaler (not written)
  bool skipped = false;
};

/// Where `weights` is a run's best_model.pt whose best_model.json (beside
/// it) names other weights (by CRC-32): what is wrong, in words; else "".
std::string best_model_mismatch(const std::string& weights);

class RunFolder {
 public:
  /// Every rank calls it. Rank 0 writes config.json and opens metrics.jsonl:
  /// emptied for a fresh run, or cut back to what `resumed` had done (steps
  /// up to its global step, epochs before its first). With
  /// options.trace_samples, rank 0 empties the trace or cuts it back the same
  /// way, and after a barrier every rank opens it to append.
  RunFolder(const TrainOptions& options, const ResumeState& resumed, Communicator& comm);

  /// Appends one line per sample of a step to the trace; nothing without one.
  void trace(int64_t epoch, int64_t step, int64_t rank, const std::vector<SampleMeta>& meta);
  /// Rank 0 only, like the three below.
  void write_step(const MetricsLine& line);
  /// `val_dice` NaN is written as null; per_class (when more than one class)
  /// as "val_dice_per_class", a list with null for NaN, and the classes'
  /// names as "val_classes".
  /// `val_rank_seconds`: each rank's validation time ("val_seconds"), when it validated.
  void write_epoch(const MetricsLine& line, double val_dice, const std::vector<double>& per_class,
                   const std::vector<std::string>& class_names, double seconds,
                   const std::vector<double>& val_rank_seconds = {});
  /// model.pt: the state_dict, as torch.save writes it.
  void save_model(const NamedTensors& state) const;
  /// best_model.pt (as model.pt) and best_model.json {metric, epoch, step},
  /// each atomically, the weights first.
  void save_best(const NamedTensors& state, double metric, int64_t epoch, int64_t step) const;
  /// Rank 0: one line of fingerprints.jsonl (options.fingerprints; emptied
  /// for a fresh run, cut back to the resumed step like metrics.jsonl).
  void write_fingerprint(const std::string& json_line);
  /// curves.png (see the free draw_curves) from metrics.jsonl.
  void draw_curves() const;

  std::string checkpoint_path() const;
  /// The options as config.json holds them (checkpoints keep them too).
  const std::string& config_json() const { return config_json_; }

 private:
  std::string path(const char* name) const;

  std::string dir_;
  std::string config_json_;
  LineFile metrics_, trace_, fingerprints_;
};

}  // namespace volshard
