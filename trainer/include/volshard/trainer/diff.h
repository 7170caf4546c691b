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
/// read differently) and model.pt. `identical` needs the same steps in both,
/// not only as many. Throws std::invalid_argument (bad input: the CLI's exit
/// status 2) naming a folder or file that is missing or not a run's, and the
/// file and line ("fingerprints.jsonl:7: ...") of a line that is not a
/// fingerprint: not JSON, nested deeper than JsonLinesLimits allows, a field of
/// the wrong type, a step that is not a whole number from 1 or does not
/// increase. Every file is checked to be a regular file of bounded size before
/// it is read (a directory, a FIFO or /dev/zero is refused, not waited on).
RunDiff diff_runs(const std::string& run_a, const std::string& run_b);

}  // namespace volshard
