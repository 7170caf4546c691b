#pragma once
// The process-wide settings a training rank runs under: intra-op threads,
// deterministic algorithms, and which BLAS the process loaded. (The allocator
// is tuned by the program at start-up, before any thread: main() calls
// tune_allocator_for_volumes; mallopt after threads start is unsafe.)

#include <cstdint>
#include <string>

#include "volshard/trainer/options.h"

namespace volshard {

/// Sets LibTorch's intra-op threads
/// (options.threads, or cores / local_world_size, at least 1) and, with
/// options.deterministic, deterministic algorithms (and, for --amp bf16 on
/// the CPU, convolutions without oneDNN, whose bfloat16 kernels are not). Process-wide: call before
/// any tensor work. Returns the thread count.
int64_t set_up_machine(const TrainOptions& options);

/// The BLAS library mapped into this process and its path, e.g. "OpenBLAS
/// (OpenMP) /usr/lib/...", from /proc/self/maps; "none found ..." otherwise.
std::string loaded_blas();

}  // namespace volshard
