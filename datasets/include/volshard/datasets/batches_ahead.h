#pragma once
// The loader's batches on the training device, one step ahead: while a step
// computes, the next batch is taken from the loader and its copy to the
// device runs on a side stream; the step that uses it waits for that copy
// alone (an event), as PyTorch's recipe of pinned batches copied non_blocking
// on a separate stream. On the CPU (and where a device has no streams) the
// same order, with the copy on the current stream or none at all. The
// trainer's engine and the Python Loader (with `device=`) both take their
// batches from it.

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "volshard/datasets/loader.h"

namespace volshard {

/// A loader batch and its tensors on the device.
struct DeviceBatch {
  Batch host;               ///< as the loader made it (meta, wait, fingerprints read its bytes)
  at::Tensor image, label;  ///< on the device
  /// The seconds the next() that handed this batch out spent waiting in the
  /// loader, for this batch or the one it took ahead: the step's own data wait.
  double waited_seconds = 0;
};

class BatchesAhead {
 public:
  /// What is done to a batch on the host before its copy, on the thread that
  /// calls next() (the Python Loader's user transform, which replaces the
  /// batch's image and label). Its exception is the batch's error.
  using HostStep = std::function<void(Batch&)>;

  /// `loader` must outlive this. `channels_last`: images arrive in
  /// channels-last 3D layout (made on the side stream with the copy).
  BatchesAhead(DataLoader& loader, c10::Device device, bool channels_last = false,
               HostStep on_host = {});
  /// Starts the loader's epoch, dropping a batch taken ahead from the last one.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch);
  /// The epoch's next batch, ready to use on the current stream, and the one
  /// after it taken and on its way; nullopt at the epoch's end. Rethrows the
  /// loader's errors for the batch that holds them.
  std::optional<DeviceBatch> next();
  /// Whether copies run on a side stream (a CUDA device).
  bool side_stream() const { return stream_.has_value(); }

 private:
  struct Pending {
    DeviceBatch batch;
    std::optional<c10::Event> copied;  ///< recorded on the side stream after the copy
  };
  std::optional<Pending> take();

  DataLoader& loader_;
  c10::Device device_;
  bool channels_last_ = false;
  HostStep on_host_;
  std::optional<c10::Stream> stream_;
  std::optional<Pending> ahead_;
  std::exception_ptr ahead_error_;  ///< the loader's error for the batch ahead
  bool ended_ = true;
};

}  // namespace volshard
