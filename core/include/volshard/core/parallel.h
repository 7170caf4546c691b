#pragma once
// The one thread loop of the libraries: items handed out by index to a few
// threads, the first error rethrown once all have stopped. Standard library
// only; ATen's intra-op pool is for kernels, this is for whole volumes.

#include <cstdint>
#include <functional>

namespace volshard {

/// Runs item(i) for every i in [0, count) on up to `threads` threads (the
/// calling thread is one of them), each taking the next index not yet taken,
/// and returns when all have stopped. Which thread runs an item is not fixed,
/// so item(i) must depend on i alone for the result to.
///
/// item returns false to stop every thread from taking more (a cache that is
/// full). The first exception thrown by an item (in time) also stops them and
/// is rethrown here after all threads have joined; items already running
/// finish. `on_done(done, count)`, if set, runs after each finished item, one
/// call at a time. A thread the system refuses to start (EAGAIN) leaves its
/// share to the others: never std::terminate, never a lost item.
void parallel_items(int64_t count, int64_t threads, const std::function<bool(int64_t)>& item,
                    const std::function<void(int64_t, int64_t)>& on_done = {});

}  // namespace volshard
