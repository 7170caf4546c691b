#pragma once
// Where the network runs: one place that every caller (train, validation,
// predict) asks, so that "auto" means the same everywhere.

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "volshard/trainer/comm.h"

namespace volshard {

enum class DeviceKind {
  kAuto,  ///< CUDA when this build and machine have a device, else the CPU
  kCpu,
  kCuda,  ///< refused where there is none
};
const std::vector<std::pair<std::string, DeviceKind>>& enum_names(DeviceKind);

/// The device of the rank that is `local_rank` on its machine: cuda:(local_rank
/// mod the devices) as torchrun's recipe (`cuda:LOCAL_RANK`), or the CPU.
/// Throws std::invalid_argument for kCuda without a CUDA device.
c10::Device resolve_device(DeviceKind kind, int64_t local_rank);

/// kAuto's backend on `device`: NCCL between GPUs, Gloo on CPUs.
Backend backend_for(Backend chosen, const c10::Device& device);

}  // namespace volshard
