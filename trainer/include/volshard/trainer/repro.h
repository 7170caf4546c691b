#pragma once
// `volshard repro`: the reproducibility guarantees checked on a user's own
// configuration at small scale, by running `volshard train` several times.

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/trainer/train.h"

namespace volshard {

struct ReproOptions {
  TrainOptions
      train;  ///< the user's configuration (out_dir: where the runs go; empty: a temporary folder)
  int64_t steps = 4;           ///< training steps per run, >= 2
  int64_t nproc_per_node = 2;  ///< ranks of the distributed runs, >= 2
  std::string binary;          ///< the volshard executable (default: this process's)
  bool keep = false;           ///< keep the runs' folders
  void validate() const;
};

struct ReproCheck {
  std::string name;
  bool passed = false;
  std::string evidence;
};

/// Runs, in order: (1) the same configuration twice on nproc_per_node ranks:
/// bit-identical model.pt and identical metrics; (2) SIGKILL of all workers
/// half-way, resume from the last checkpoint: model.pt and the metrics equal
/// run (1)'s; (3) one epoch's trace at 1 and nproc_per_node ranks: the same
/// multiset of (index, crop, rotation), padding aside; (4) a run checkpointed
/// mid-epoch at nproc_per_node ranks resumed at 1: every index of the epoch
/// once, repeats only from padding. Prints progress to stderr.
std::vector<ReproCheck> run_repro_checks(const ReproOptions& options);

/// The verdict table (check, result, evidence).
std::string format_repro_table(const std::vector<ReproCheck>& checks);

}  // namespace volshard
