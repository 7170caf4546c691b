#include "volshard/core/limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

namespace volshard {
namespace {

using ::testing::HasSubstr;

TEST(LimitsTest, BytesReadAsPeopleWriteThem) {
  EXPECT_EQ(bytes_text(512), "512 B");
  EXPECT_EQ(bytes_text(24e9), "24 GB");
  EXPECT_EQ(bytes_text(3.7e12), "3.7 TB");
  EXPECT_EQ(bytes_text(9.4e15), "9.4 PB");
  EXPECT_EQ(bytes_text(1e30), "1e+12 EB");
}

TEST(LimitsTest, WhatDoesNotFitInMemoryIsRefusedNamingTheNeedAndTheMachine) {
  ::setenv("VOLSHARD_MEMORY_BYTES", "24000000000", 1);
  EXPECT_EQ(physical_memory_bytes(), 24000000000);
  EXPECT_NO_THROW(check_fits_in_memory(23e9, "--crop=96"));
  try {
    check_fits_in_memory(3.7e12, "--roi=100000");
    ADD_FAILURE() << "3.7 TB fit in 24 GB";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--roi=100000 needs 3.7 TB of memory; this machine has 24 GB");
  }
  ::unsetenv("VOLSHARD_MEMORY_BYTES");
  EXPECT_GT(physical_memory_bytes(), int64_t{1} << 28);  // /proc/meminfo
}

}  // namespace
}  // namespace volshard
