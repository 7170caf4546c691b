// repro.cpp: what `volshard repro` expects on each device, and its table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "volshard/trainer/repro.h"

namespace volshard {
namespace {

// `volshard repro` on CUDA without --deterministic expects the weights to
// differ (and says why) instead of a false FAIL; everywhere else it expects
// bits. The table marks such a pass "expected" and gives the reason.
TEST(ReproTest, ExpectsWeightsToDifferOnlyOnCudaWithoutDeterministicAlgorithms) {
  TrainOptions o;
  EXPECT_EQ(expected_nondeterminism(o, c10::Device(c10::kCUDA, 0)), "");
  EXPECT_EQ(expected_nondeterminism(o, c10::Device(c10::kCPU)), "");
  o.deterministic = false;
  EXPECT_EQ(expected_nondeterminism(o, c10::Device(c10::kCPU)), "");
  const std::string why = expected_nondeterminism(o, c10::Device(c10::kCUDA, 0));
  EXPECT_THAT(why, ::testing::HasSubstr("without --deterministic, cuDNN's convolution backward"));
  ReproCheck differed{"same seed twice", true, "model.pt DIFFERS", why};
  ReproCheck failed{"world-size invariance", false, "DIFFERENT", ""};
  const std::string table = format_repro_table({differed, failed});
  EXPECT_THAT(table, ::testing::HasSubstr("| expected | model.pt DIFFERS; weights differ as "
                                          "expected: on CUDA without --deterministic"));
  EXPECT_THAT(table, ::testing::HasSubstr("| FAIL     | DIFFERENT\n"));
}

}  // namespace
}  // namespace volshard
