#include "volshard/trainer/device.h"

#include <ATen/Context.h>

#include <stdexcept>

namespace volshard {

const std::vector<std::pair<std::string, DeviceKind>>& enum_names(DeviceKind) {
  static const std::vector<std::pair<std::string, DeviceKind>> kNames{
      {"auto", DeviceKind::kAuto}, {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}};
  return kNames;
}

c10::Device resolve_device(DeviceKind kind, int64_t local_rank) {
  const int64_t gpus = at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0;
  if (kind == DeviceKind::kCpu || (kind == DeviceKind::kAuto && gpus == 0)) return c10::kCPU;
  if (gpus == 0)
    throw std::invalid_argument(
        "--device cuda: no CUDA device here (LibTorch without CUDA, or no GPU visible); use "
        "--device cpu");
  const auto index = static_cast<c10::DeviceIndex>((local_rank < 0 ? 0 : local_rank) % gpus);
  return {c10::kCUDA, index};
}

Backend backend_for(Backend chosen, const c10::Device& device) {
  if (chosen != Backend::kAuto) return chosen;
  return device.is_cuda() ? Backend::kNccl : Backend::kGloo;
}

}  // namespace volshard
