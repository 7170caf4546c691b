#pragma once
// The process-wide settings a training rank runs under: allocator, intra-op
// threads, deterministic algorithms, and which BLAS the process loaded.

#include <cstdint>
#include <string>

#include "volshard/trainer/options.h"

namespace volshard {

/// Tunes the allocator for volumes, sets LibTorch's intra-op threads
/// (options.threads, or cores / local_world_size, at least 1) and, with
/// options.deterministic, deterministic algorithms. Process-wide: call before
/// any tensor work. Returns the thread count.
int64_t set_up_machine(const TrainOptions& options);

/// The BLAS library mapped into this process and its path, e.g. "OpenBLAS
/// (OpenMP) /usr/lib/...", from /proc/self/maps; "none found ..." otherwise.
std::string loaded_blas();

}  // namespace volshard
