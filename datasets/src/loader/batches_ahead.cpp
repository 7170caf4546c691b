#include "volshard/datasets/batches_ahead.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <utility>

namespace volshard {

namespace {

// A stream from the device's pool, or nullopt where the device has none (the
// CPU, meta).
std::optional<c10::Stream> side_stream_of(const c10::Device& device) {
  if (device.is_cpu() || !c10::impl::hasDeviceGuardImpl(device.type())) return std::nullopt;
  try {
    return c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
  } catch (const c10::Error&) {
    return std::nullopt;  // a backend without a stream pool: copies on the current stream
  }
}

}  // namespace

BatchesAhead::BatchesAhead(DataLoader& loader, c10::Device device, bool channels_last,
                           HostStep on_host)
    : loader_(loader),
      device_(device),
      channels_last_(channels_last),
      on_host_(std::move(on_host)),
      stream_(side_stream_of(device)) {}

void BatchesAhead::start_epoch(std::vector<int64_t> indices, int64_t epoch) {
  ahead_.reset();
  ahead_error_ = nullptr;
  loader_.start_epoch(std::move(indices), epoch);
  ended_ = false;
}

auto BatchesAhead::take() -> std::optional<Pending> {
  std::optional<Batch> batch = loader_.next();
  if (!batch) {
    ended_ = true;
    return std::nullopt;
  }
  Pending p;
  p.batch.host = std::move(*batch);
  if (on_host_) on_host_(p.batch.host);
  auto copy = [&] {
    p.batch.image = p.batch.host.image.to(device_, /*non_blocking=*/true);
    if (channels_last_ && p.batch.image.dim() == 5)
      p.batch.image = p.batch.image.contiguous(at::MemoryFormat::ChannelsLast3d);
    p.batch.label = p.batch.host.label.to(device_, /*non_blocking=*/true);
  };
  if (!stream_) {
    copy();
    return p;
  }
  const c10::StreamGuard on_side(*stream_);
  copy();
  p.copied.emplace(device_.type());
  p.copied->record(*stream_);
  return p;
}

std::optional<DeviceBatch> BatchesAhead::next() {
  if (ahead_error_) std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  double waited = 0;  // in the loader during this call
  std::optional<Pending> current;
  if (ahead_) {
    current = std::exchange(ahead_, std::nullopt);
  } else {
    current = take();
    if (current) waited += current->batch.host.wait_seconds;
  }
  if (!current) return std::nullopt;
  if (!ended_) {
    try {
      ahead_ = take();  // the next batch's copy overlaps this step
      if (ahead_) waited += ahead_->batch.host.wait_seconds;
    } catch (...) {
      ahead_error_ = std::current_exception();  // raised when that batch is asked for
    }
  }
  current->batch.waited_seconds = waited;
  if (current->copied) {
    const c10::Stream here = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
    current->copied->block(here);
    // Memory the side stream allocated is used on this one: the caching
    // allocator must not hand it out again before this stream is done with it.
    current->batch.image.record_stream(here);
    current->batch.label.record_stream(here);
  }
  return std::move(current->batch);
}

}  // namespace volshard
