// device.cpp: what --deterministic's refusal names.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "volshard/trainer/device.h"

namespace volshard {
namespace {

// --deterministic: torch's refusal of an operation without a deterministic
// implementation (a real one: put_ without accumulate, refused on the CPU
// too) is read for the operation's name, which train's error then gives.
TEST(DeterministicTest, ReadsTheOperationTorchRefusesFromItsMessage) {
  auto& context = at::globalContext();
  const bool was = context.deterministicAlgorithms();
  const bool was_warn_only = context.deterministicAlgorithmsWarnOnly();
  context.setDeterministicAlgorithms(true, false);
  std::string message;
  try {
    at::zeros({5}).put_(at::tensor({1, 1}, at::kLong), at::tensor({1.0f, 2.0f}), false);
  } catch (const c10::Error& e) {
    message = e.msg();
  }
  context.setDeterministicAlgorithms(was, was_warn_only);
  ASSERT_FALSE(message.empty()) << "torch no longer refuses put_ under deterministic algorithms";
  EXPECT_EQ(refused_nondeterministic_kernel(message), "put_");
  EXPECT_EQ(refused_nondeterministic_kernel(
                "upsample_trilinear3d_backward_out_cuda does not have a deterministic "
                "implementation, but you set 'torch.use_deterministic_algorithms(True)'."),
            "upsample_trilinear3d_backward_out_cuda");
  EXPECT_EQ(refused_nondeterministic_kernel("CUDA out of memory. Tried to allocate 2.00 GiB"), "");
}

}  // namespace
}  // namespace volshard
