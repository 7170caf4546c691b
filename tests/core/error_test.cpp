#include "volshard/core/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace volshard {
namespace {

TEST(ErrorTest, ShapeTextJoinsSizesOrPrintsThemAsAPythonTuple) {
  EXPECT_EQ(shape_text(std::array<int64_t, 3>{96, 64, 1}), "96x64x1");
  EXPECT_EQ(shape_text(std::array<int64_t, 3>{16, 8, 8}, true), "(16, 8, 8)");
  EXPECT_EQ(shape_text(std::vector<int64_t>{}), "");
}

TEST(ErrorTest, FailuresNameThePathAndTheCause) {
  EXPECT_THAT([] { fail_file("a/b.nii", "bad magic"); },
              ::testing::ThrowsMessage<std::runtime_error>(::testing::StrEq("a/b.nii: bad magic")));
  EXPECT_THAT([] { fail_errno("c.nii", "cannot open", ENOENT); },
              ::testing::ThrowsMessage<std::runtime_error>(
                  ::testing::StrEq("c.nii: cannot open: No such file or directory")));
}

TEST(ErrorTest, ErrnoFailuresKeepTheErrnoForCallersThatMapIt) {
  try {
    fail_errno("c.nii", "cannot open", ENOENT);
    FAIL() << "fail_errno returned";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_STREQ(e.what(), "c.nii: cannot open: No such file or directory");
  }
}

}  // namespace
}  // namespace volshard
