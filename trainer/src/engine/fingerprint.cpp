#include "engine/fingerprint.h"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "volshard/datasets/content_hash.h"

namespace volshard {
namespace {

uint64_t tensor_xxh64(const at::Tensor& t, uint64_t seed = 0) {
  const at::Tensor c = t.to(at::kCPU).contiguous();  // a batch made on a GPU reads through the host
  return xxh64(c.data_ptr(), static_cast<size_t>(c.nbytes()), seed);
}

}  // namespace

void SampleHashes::add(const Batch& batch) {
  for (size_t row = 0; row < batch.meta.size(); ++row) {
    const SampleMeta& m = batch.meta[row];
    const std::array<int64_t, 2> which{m.index, m.patch_index};
    const uint64_t id = xxh64(which.data(), sizeof which);
    std::array<int64_t, 8> aug{
        m.index, m.patch_index, m.crop_start[0], m.crop_start[1], m.crop_start[2], m.rot90_k, 0, 0};
    for (size_t a = 0; a < m.flipped.size() && a < 3; ++a)
      aug[6] |= static_cast<int64_t>(m.flipped[a] ? 1 : 0) << a;
    indices += id;
    augmentation += xxh64(aug.data(), sizeof aug);
    const auto r = static_cast<int64_t>(row);
    bytes += tensor_xxh64(batch.label[r], tensor_xxh64(batch.image[r]));
  }
}

SampleHashes SampleHashes::over_ranks(Communicator& comm) const {
  // 32-bit halves summed as int64: exact for fewer than 2^31 samples, then
  // recombined modulo 2^64 (unsigned arithmetic, well defined).
  const std::array<uint64_t, 3> v{indices, augmentation, bytes};
  at::Tensor halves = at::empty({6}, at::kLong);
  for (size_t i = 0; i < 3; ++i) {
    halves[static_cast<int64_t>(2 * i)] = static_cast<int64_t>(v[i] >> 32);
    halves[static_cast<int64_t>(2 * i + 1)] = static_cast<int64_t>(v[i] & 0xffffffffULL);
  }
  comm.allreduce_sum(halves);
  const auto* h = halves.data_ptr<int64_t>();
  auto join = [&](size_t i) {
    return (static_cast<uint64_t>(h[2 * i]) << 32) + static_cast<uint64_t>(h[2 * i + 1]);
  };
  return {join(0), join(1), join(2)};
}

std::vector<uint64_t> group_hashes(const std::vector<at::Tensor>& tensors,
                                   const std::vector<std::vector<int64_t>>& groups, bool grads) {
  std::vector<uint64_t> out;
  for (const auto& group : groups) {
    Xxh64 h;
    for (const int64_t i : group) {
      const at::Tensor& t = tensors[static_cast<size_t>(i)];
      const at::Tensor source = grads ? t.grad() : t;
      if (!source.defined()) continue;  // a parameter without a gradient adds nothing
      const at::Tensor c = source.detach().to(at::kCPU).contiguous();
      h.update(c.data_ptr(), static_cast<size_t>(c.nbytes()));
    }
    out.push_back(h.digest());
  }
  return out;
}

namespace {

// The step a test hook's variable names (read once), or -1.
int64_t step_of(const char* variable) {
  const char* v = std::getenv(variable);
  return v == nullptr ? int64_t{-1} : static_cast<int64_t>(std::atoll(v));
}

}  // namespace

void inject_gradient_noise(const std::vector<at::Tensor>& parameters, int64_t step) {
  static const int64_t at_step = step_of("VOLSHARD_INJECT_GRADIENT_NOISE");
  if (step != at_step || parameters.empty() || !parameters[0].grad().defined()) return;
  at::Tensor first = parameters[0].grad().view({-1})[0];  // on any device
  const float g = first.item<float>();
  first.fill_(std::nextafter(g, g >= 0 ? 1e30f : -1e30f));
}

void inject_gradient_inf(const std::vector<at::Tensor>& parameters, int64_t step) {
  static const int64_t at_step = step_of("VOLSHARD_INJECT_INF_GRADIENT");
  if (step != at_step || parameters.empty() || !parameters[0].grad().defined()) return;
  parameters[0].grad().view({-1})[0].fill_(std::numeric_limits<double>::infinity());
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace volshard
