#pragma once
// What a training rank prints: a line per step (rewritten in place on a
// terminal) and a line per epoch.

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/core/progress.h"  // duration_text, readable_seconds

namespace volshard {

/// From now on rank 0's lines (print_run_line, the step and epoch lines,
/// warnings) are also written to `path` (RUN/train.log), each with the UTC
/// time: `append` (a resumed run) continues the file, else it starts afresh.
/// Throws std::runtime_error naming the file when it cannot be opened.
void open_run_log(const std::string& path, bool append);

/// `v` as std::ostream prints it with `digits` significant digits ("0.4446", "nan").
std::string number_text(double v, int digits = 6);

struct StepProgress {
  int64_t epoch = 0;  ///< 0-based; printed 1-based
  int64_t epochs = 0;
  int64_t step = 0;  ///< global, after the step
  int64_t total_steps = 0;
  double loss = 0;
  double samples_per_s = 0;
  double wait_fraction = 0;  ///< of the step's time spent waiting for data
  double wait_seconds = 0;   ///< the step's wait for data
  double eta_seconds = 0;
};

/// "epoch 1/2 step 3/8 loss 0.5 | 12.3 samples/s | data-wait 15.2 ms (4.5%) | ETA 0:00:10":
/// with a bar over the run's steps, rewritten in place on stderr when `tty`;
/// else a line on stdout that starts with the UTC time ("[2026-11-23 01:30:05Z] ").
void print_step_progress(const StepProgress& progress, bool tty);

/// "epoch 1/2: loss 0.4446, validation Dice 0.6713" on stdout; no Dice when
/// `val_dice` is NaN.
/// "epoch 3/10: loss 0.41, validation Dice 0.85 (class 1 0.86, class 2 0.84)":
/// the classes only with more than one.
void print_epoch_line(int64_t epoch, int64_t epochs, double loss, double val_dice,
                      const std::vector<double>& per_class = {},
                      const std::vector<std::string>& class_names = {});

}  // namespace volshard
