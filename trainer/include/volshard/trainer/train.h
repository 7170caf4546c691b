#pragma once
// The training job: MONAI's DDP UNet tutorial, in C++, on this project's
// sampler, cache, transforms and loader. One call per rank.
//
// Its room is trainer/src/engine/ (README.md there): the step loop, the run
// folder, resume, validation; data_split.h says which volumes (checked before
// any worker starts), predict.h what a trained model writes.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include "volshard/trainer/comm.h"
#include "volshard/trainer/options.h"
#include "volshard/trainer/rank_plan.h"

namespace volshard {

struct TrainSummary {
  int64_t epochs_done = 0;
  int64_t global_step = 0;
  double last_loss = 0;
  double last_val_dice = -1;  ///< -1: no validation ran
  bool interrupted = false;   ///< stopped by a signal or max_steps (checkpoint written)
  /// The best validation of the run, resumed parts included (best_model.pt):
  /// best_epoch -1 when none ran; 0-based.
  int64_t best_epoch = -1;
  double best_val_dice = -1;
  /// Gradient bucket all-reduces this rank launched (one set per optimizer
  /// step: --accumulate N divides them by N).
  int64_t gradient_allreduces = 0;
};

/// Runs (or resumes) training on this rank. Rank 0 writes RUN/: model.pt,
/// checkpoint.pt, metrics.jsonl, config.json and curves.png; every rank takes
/// part in every collective. `stop_requested` is polled between steps (e.g.
/// set by SIGTERM): the ranks agree on it, finish the step, write a checkpoint
/// and return with interrupted = true. A program that trains should call
/// tune_allocator_for_volumes() (datasets/loader.h) at start-up, before any
/// thread, as volshard's main() does: results are the same without it, the
/// memory is not.
TrainSummary train(const TrainOptions& options, Communicator& comm,
                   const std::function<bool()>& stop_requested = {});
/// train() with the rank's plan made by the caller (RankPlan::make, as
/// `volshard train` makes it before the process group, whose backend it
/// picks); its rank and world must be the process group's.
TrainSummary train(const TrainOptions& options, const RankPlan& plan, Communicator& comm,
                   const std::function<bool()>& stop_requested = {});

/// Prints `line` (without its newline) on `stream`, and on rank 0 of a run
/// appends it to RUN/train.log too: the log holds what both streams carried
/// (the per-step line as written off a terminal, warnings included).
void print_run_line(std::ostream& stream, const std::string& line);

}  // namespace volshard
