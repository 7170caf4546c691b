#pragma once
// Per-step fingerprints (RUN/fingerprints.jsonl) for `volshard diff`: 64-bit
// hashes of what a step read and wrote, cheap enough to take every step.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "volshard/datasets/loader.h"
#include "volshard/trainer/comm.h"

namespace volshard {

/// The sample side of a step, summed over its samples (a 64-bit wrapping
/// sum, so it does not depend on how the samples are spread over ranks or
/// ordered): which samples (index, patch), their augmentation (crop, turns,
/// flips besides), and their bytes (image and label rows).
struct SampleHashes {
  uint64_t indices = 0, augmentation = 0, bytes = 0;
  /// Adds every row of `batch`.
  void add(const Batch& batch);
  /// The sums of every rank (one small all-reduce; every rank calls it).
  SampleHashes over_ranks(Communicator& comm) const;
};

/// XXH64 of each group's tensors (their grads when `grads`, else their
/// values), bytes in order: one hash per gradient bucket.
std::vector<uint64_t> group_hashes(const std::vector<at::Tensor>& tensors,
                                   const std::vector<std::vector<int64_t>>& groups, bool grads);

/// Fault injection for `volshard diff`'s tests, as VOLSHARD_INJECT_WRITE_FAILURE
/// is for checkpoint writes: with VOLSHARD_INJECT_GRADIENT_NOISE=STEP, before
/// optimizer step STEP (1-based) every rank moves the first parameter's first
/// gradient element by one float ulp, as a nondeterministic kernel would.
void inject_gradient_noise(const std::vector<at::Tensor>& parameters, int64_t step);
/// With VOLSHARD_INJECT_INF_GRADIENT=STEP, before optimizer step STEP every
/// rank sets the first parameter's first gradient element to inf, as an
/// overflowing float16 backward would (--amp fp16's GradScaler skips the step).
void inject_gradient_inf(const std::vector<at::Tensor>& parameters, int64_t step);

/// "0123456789abcdef".
std::string hex64(uint64_t value);

}  // namespace volshard
