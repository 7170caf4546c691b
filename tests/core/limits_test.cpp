#include "volshard/core/limits.h"

#include <sys/resource.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
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

TEST(LimitsTest, AFailedAllocationSaysTheSizeAskedAndWhatThereWas) {
  ::setenv("VOLSHARD_MEMORY_BYTES", "24000000000", 1);
  const OutOfMemoryError e(2048000000);
  EXPECT_EQ(e.bytes(), 2048000000u);
  EXPECT_THAT(e.what(), HasSubstr("could not allocate 2.0 GB (2048000000 bytes): "));
  EXPECT_THAT(e.what(), HasSubstr(" of this machine's 24 GB available"));
  // A caller names the file or the step; the size stays, and so does the type.
  const OutOfMemoryError named("big.nii.gz", e);
  EXPECT_EQ(named.bytes(), 2048000000u);
  EXPECT_EQ(std::string(named.what()), "big.nii.gz: " + std::string(e.what()));
  const OutOfMemoryError twice("Spacing", named);
  EXPECT_THAT(twice.what(),
              ::testing::StartsWith("Spacing: big.nii.gz: could not allocate 2.0 GB"));
  // A plain std::bad_alloc (new, a vector) has no size: the text says so.
  const OutOfMemoryError plain("img0.nii.gz", std::bad_alloc());
  EXPECT_EQ(plain.bytes(), 0u);
  EXPECT_THAT(plain.what(), ::testing::StartsWith("img0.nii.gz: could not allocate memory: "));
  ::unsetenv("VOLSHARD_MEMORY_BYTES");
  EXPECT_GT(available_memory_bytes(), 0);
}

TEST(LimitsTest, AnAddressSpaceLimitIsNamed) {
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  rlimit limited = old;
  limited.rlim_cur = rlim_t{64} << 30;
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < limited.rlim_cur)
    limited.rlim_cur = old.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_AS, &limited), 0);
  const std::string text = OutOfMemoryError(1000).what();
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  EXPECT_THAT(text, HasSubstr("the process limited to " +
                              bytes_text(static_cast<double>(limited.rlim_cur)) +
                              " of address space (ulimit -v)"));
}

}  // namespace
}  // namespace volshard
