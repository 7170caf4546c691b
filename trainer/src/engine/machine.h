#pragma once
// The process-wide settings a training rank runs under: intra-op threads,
// deterministic algorithms, and which BLAS the process loaded. (The allocator
// is tuned by the program at start-up, before any thread: main() calls
// tune_allocator_for_volumes; mallopt after threads start is unsafe.)

#include <cstdint>
#include <string>

#include "volshard/trainer/options.h"
#include "volshard/trainer/rank_plan.h"

namespace volshard {

/// Sets LibTorch's intra-op threads to plan.threads and, with
/// options.deterministic, deterministic algorithms (and, for --amp bf16 on
/// the CPU, convolutions without oneDNN, whose bfloat16 kernels are not).
/// Process-wide: call before any tensor work.
void set_up_machine(const TrainOptions& options, const RankPlan& plan);

/// The BLAS library mapped into this process and its path, e.g. "OpenBLAS
/// (OpenMP) /usr/lib/...", from /proc/self/maps; "none found ..." otherwise.
std::string loaded_blas();

}  // namespace volshard
