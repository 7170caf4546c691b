#pragma once
// `volshard diff RUN_A RUN_B`: where two training runs part, and why.

#include <cstdint>
#include <string>

namespace volshard {

struct RunDiff {
  bool identical = false;   ///< configs, fingerprints and model.pt all equal
  int64_t first_step = -1;  ///< the first step whose fingerprints differ; -1: none
  /// What differs first at that step, in the order a step makes things:
  /// "data order", "augmentation", "batch bytes", "loss", "gradients",
  /// "weights"; or "" when no step differs.
  std::string first_part;
  std::string cause;   ///< the likely cause, in words
  std::string report;  ///< the lines `volshard diff` prints
};

/// Compares RUN_A and RUN_B (folders of `volshard train`): their config.json
/// (the options that differ), their fingerprints.jsonl step by step (data
/// order, augmentation, batch bytes, loss, each gradient bucket after the
/// all-reduce with the parameters it holds, the weights after the step),
/// their --trace-samples files when both kept one (the first sample the step
/// read differently) and model.pt. Throws std::invalid_argument naming a folder or file that is
/// missing or not a run's.
RunDiff diff_runs(const std::string& run_a, const std::string& run_b);

}  // namespace volshard
