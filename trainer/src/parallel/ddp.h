#pragma once
// Data parallelism without torch.nn.parallel.DistributedDataParallel (the C++
// frontend has none): parameters broadcast from rank 0, and gradients averaged
// by bucketed all-reduces that start during the backward pass, as soon as a
// bucket's gradients are all computed.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "volshard/trainer/comm.h"

namespace volshard {

/// Copies rank `root`'s values of these tensors to every rank (one coalesced
/// broadcast per dtype). Call on every rank.
void broadcast_tensors(const std::vector<at::Tensor>& tensors, Communicator& comm,
                       int64_t root = 0);

struct GradientReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  ///< DDP's bucket_cap_mb = 25
  int64_t first_bucket_bytes = int64_t{1}
                               << 20;  ///< DDP's first bucket: 1 MiB, so communication starts early
  void validate() const;
};

/// Averages the gradients of `parameters` over the ranks of `comm`.
/// Parameters are bucketed in reverse order (the order backward produces
/// them); a gradient hook copies each gradient into its bucket, and a full
/// bucket is all-reduced at once, in bucket order, while backward goes on.
///
///   reducer.prepare();  loss.backward();  reducer.finish();  optimizer.step();
///
/// Gradient accumulation (DDP's no_sync): backward passes outside a
/// prepare()/finish() pair sum local gradients into each grad; the pass
/// inside the pair all-reduces those sums plus its own, once.
///
/// Every parameter must receive a gradient each step. Not thread-safe.
class GradientReducer {
 public:
  GradientReducer(std::vector<at::Tensor> parameters, Communicator& comm,
                  GradientReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before each backward.
  void prepare();
  /// After backward: waits for the all-reduces and leaves the average in each
  /// parameter's grad. Throws std::logic_error naming a parameter that got no
  /// gradient, and CommError when a peer is lost.
  void finish();

  /// Parameter indices per bucket, in launch order.
  const std::vector<std::vector<int64_t>>& buckets() const;
  /// Buckets launched before finish() was called in the last step: > 0 means
  /// communication overlapped the backward pass.
  int64_t launched_during_backward() const;
  /// Bucket all-reduces launched since construction.
  int64_t allreduces() const;

  struct Impl;  ///< opaque

 private:
  std::unique_ptr<Impl> impl_;
};

/// The mean over `count` samples (of every rank together) of per-sample
/// gradients, independent of how samples are spread over ranks and of their
/// order: each rank's `samples` (flat float32, one per sample, the parameters'
/// grads in order) become 64-bit integers at one scale 2^e agreed over the
/// ranks (from the largest |g| of all samples, an all-reduce max, so that
/// count such values sum below 2^62), are summed locally and all-reduced as
/// integers (exact, so associative), then divided by 2^e and count. Writes
/// the mean into each parameter's grad. Every rank calls it, also with no
/// samples. Returns e.
int exact_gradient_mean(const std::vector<at::Tensor>& samples, int64_t count,
                        const std::vector<at::Tensor>& parameters, Communicator& comm);

/// The parameters' grads as one flat float32 tensor (a copy), in order.
at::Tensor flat_gradients(const std::vector<at::Tensor>& parameters);

}  // namespace volshard
