#pragma once
// `volshard repro`: the reproducibility guarantees checked on a user's own
// configuration at small scale, by running `volshard train` several times.

#include <c10/core/Device.h>

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
  /// Set when the runs' weights differed where this configuration does not
  /// promise bit-identity (see expected_nondeterminism) while everything the
  /// data pipeline promises held: the check passes, and this says why.
  std::string expected_difference;
};

/// Why two runs of `train` on `device` are not expected to write the same
/// bits, or "" where they are: on CUDA without --deterministic, cuDNN's
/// convolution backward and atomic adds sum in a varying order. The data
/// order, augmentation and batch bytes are promised everywhere.
std::string expected_nondeterminism(const TrainOptions& train, const c10::Device& device);

/// Runs, in order: (1) the same configuration twice on nproc_per_node ranks:
/// bit-identical model.pt and identical metrics; (2) SIGKILL of all workers
/// half-way, resume from the last checkpoint: model.pt and the metrics equal
/// run (1)'s; (3) one epoch's trace at 1 and nproc_per_node ranks: the same
/// multiset of (index, crop, rotation), padding aside; (4) a run checkpointed
/// mid-epoch at nproc_per_node ranks resumed at 1: every index of the epoch
/// once, repeats only from padding. Where expected_nondeterminism says so,
/// (1) and (2) pass with an expected_difference when only the weights, their
/// gradients and the loss differ. Prints progress to stderr.
std::vector<ReproCheck> run_repro_checks(const ReproOptions& options);

/// The verdict table (check, result: pass, FAIL or "expected" for a pass
/// with an expected_difference, evidence).
std::string format_repro_table(const std::vector<ReproCheck>& checks);

}  // namespace volshard
