#pragma once
// Collectives between ranks. The only place that touches c10d (whose C++ API
// is torch 2.x's c10d::Backend) is comm.cpp; everything else talks to
// this class.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "volshard/trainer/rendezvous.h"

namespace volshard {

/// A collective failed: a peer died, hung past the timeout, or the network
/// broke. The message names the lost rank when the heartbeats tell it.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An all-reduce in flight.
class PendingReduce {
 public:
  virtual ~PendingReduce() = default;
  /// Blocks until done; throws CommError naming the lost rank when a peer
  /// died or hung past the timeout.
  virtual void wait() = 0;
};

enum class Backend {
  kGloo,
  kNccl,
  kAuto,  ///< an option's value only: NCCL with a GPU per rank, else Gloo (backend_for, device.h)
};
std::string to_string(Backend backend);

struct CommOptions {
  Backend backend = Backend::kGloo;
  /// How long a collective may wait for a peer before failing, and how long
  /// the rendezvous waits for all ranks.
  std::chrono::milliseconds timeout{120000};
};

/// A process group. With world size 1 every collective is a no-op (no
/// network, no threads). Tensors must be contiguous and on the backend's device.
class Communicator {
 public:
  /// Connects to the other ranks (rendezvous by TCP store or file store);
  /// throws std::runtime_error naming the address when it cannot.
  Communicator(const Rendezvous& rendezvous, const CommOptions& options = {});
  /// A group of one: rank 0 of 1.
  Communicator();
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  const CommOptions& options() const { return options_; }

  /// Sum over ranks, in place, asynchronously. Calls must be made in the same
  /// order on every rank.
  std::unique_ptr<PendingReduce> allreduce_sum_async(const at::Tensor& tensor);
  void allreduce_sum(const at::Tensor& tensor);
  void allreduce_max(const at::Tensor& tensor);
  void broadcast(const at::Tensor& tensor, int64_t root = 0);
  void barrier();

  struct Impl;  ///< opaque (c10d)

 private:
  std::unique_ptr<Impl> impl_;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  CommOptions options_;
};

}  // namespace volshard
