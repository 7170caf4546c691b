#pragma once
// Where the network runs: one place that every caller (train, validation,
// predict) asks, so that "auto" means the same everywhere.

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
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

/// Where the cached prefix lives and the augmentation runs (--cache-device).
enum class CacheDevice {
  kHost,    ///< host memory, the host kernels, pinned batches copied to the device
  kDevice,  ///< the training device (--device) with tensor ops: MONAI's GPU-cache recipe; on
            ///< the CPU, the same code (its batches equal kHost's bit for bit)
  kCuda,    ///< kDevice, refused unless the network trains on a GPU
};
const std::vector<std::pair<std::string, CacheDevice>>& enum_names(CacheDevice);

/// The device kind's cache and loader device (LoaderOptions::device), or
/// nullopt for host memory. Throws std::invalid_argument for kCuda when
/// `training` is not a GPU.
std::optional<c10::Device> resolve_cache_device(CacheDevice kind, const c10::Device& training);

/// The CUDA devices this process sees (0 for a LibTorch without CUDA).
int64_t visible_gpus();

/// The device of the rank that is `local_rank` on its machine: cuda:(local_rank
/// mod the devices) as torchrun's recipe (`cuda:LOCAL_RANK`), or the CPU.
/// Throws std::invalid_argument for kCuda without a CUDA device.
c10::Device resolve_device(DeviceKind kind, int64_t local_rank);

/// The operation torch's deterministic-algorithms check refused, read from
/// its message ("put_ does not have a deterministic implementation, but you
/// set 'torch.use_deterministic_algorithms(True)'..."), or "" when `message`
/// is not such a refusal.
std::string refused_nondeterministic_kernel(const std::string& message);

/// The backend of a rank on `device` with `local_world_size` ranks on its
/// machine: kAuto is NCCL when every local rank has a GPU of its own, else
/// Gloo (on CPUs, or ranks sharing a GPU: NCCL refuses two ranks on one
/// device, Gloo reduces CUDA tensors through the host). An explicit NCCL
/// with ranks sharing a GPU throws std::invalid_argument naming the counts.
Backend backend_for(Backend chosen, const c10::Device& device, int64_t local_world_size);

}  // namespace volshard
