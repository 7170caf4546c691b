#include "volshard/trainer/device.h"

#include <ATen/Context.h>

#include <stdexcept>

#include "volshard/core/field.h"

namespace volshard {

const std::vector<std::pair<std::string, DeviceKind>>& enum_names(DeviceKind) {
  static const std::vector<std::pair<std::string, DeviceKind>> kNames{
      {"auto", DeviceKind::kAuto}, {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}};
  return kNames;
}

const std::vector<std::pair<std::string, CacheDevice>>& enum_names(CacheDevice) {
  static const std::vector<std::pair<std::string, CacheDevice>> kNames{
      {"host", CacheDevice::kHost}, {"device", CacheDevice::kDevice}, {"cuda", CacheDevice::kCuda}};
  return kNames;
}

std::optional<c10::Device> resolve_cache_device(CacheDevice kind, const c10::Device& training) {
  if (kind == CacheDevice::kHost) return std::nullopt;
  if (kind == CacheDevice::kCuda && !training.is_cuda()) {
    throw FieldError(field_ref("cache_device") + "=cuda: the network trains on " + training.str() +
                     " (" + field_ref("device") + "); use " + field_ref("cache_device") +
                     "=host, or device to run the GPU path's code there");
  }
  return training;
}

int64_t visible_gpus() { return at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0; }

c10::Device resolve_device(DeviceKind kind, int64_t local_rank) {
  const int64_t gpus = visible_gpus();
  if (kind == DeviceKind::kCpu || (kind == DeviceKind::kAuto && gpus == 0)) return c10::kCPU;
  if (gpus == 0)
    throw FieldError(field_ref("device") +
                     "=cuda: no CUDA device here (LibTorch without CUDA, or no GPU visible); use " +
                     field_ref("device") + "=cpu");
  const auto index = static_cast<c10::DeviceIndex>((local_rank < 0 ? 0 : local_rank) % gpus);
  return {c10::kCUDA, index};
}

std::string refused_nondeterministic_kernel(const std::string& message) {
  static const std::string kRefusal = " does not have a deterministic implementation";
  const size_t at = message.find(kRefusal);
  if (at == std::string::npos || at == 0) return "";
  const size_t space = message.find_last_of(" \n", at - 1);
  const size_t begin = space == std::string::npos ? 0 : space + 1;
  return message.substr(begin, at - begin);
}

Backend backend_for(Backend chosen, const c10::Device& device, int64_t local_world_size) {
  const int64_t gpus = visible_gpus();
  const bool shared = device.is_cuda() && local_world_size > gpus;
  if (chosen == Backend::kNccl && shared) {
    throw FieldError(field_ref("backend") + "=nccl: " + std::to_string(local_world_size) +
                     " ranks on this machine share " + std::to_string(gpus) +
                     " GPU(s), and NCCL runs one rank per GPU; use " + field_ref("backend") +
                     "=auto (Gloo, through the host) or " + field_ref("nproc_per_node") + "=" +
                     std::to_string(gpus));
  }
  if (chosen != Backend::kAuto) return chosen;
  return device.is_cuda() && !shared ? Backend::kNccl : Backend::kGloo;
}

}  // namespace volshard
