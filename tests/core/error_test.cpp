#include "volshard/core/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <system_error>

namespace volshard {
namespace {

TEST(ErrorTest, ShapeTextJoinsSizesOrPrintsThemAsAPythonTuple) {
  EXPECT_EQ(shape_text(std::array<int64_t, 3>{96, 64, 1}), "96x64x1");
  EXPECT_EQ(shape_text(std::array<int64_t, 3>{16, 8, 8}, true), "(16, 8, 8)");
  EXPECT_EQ(shape_text(std::vector<int64_t>{}), "");
}

TEST(ErrorTest, PrintableEscapesControlBytesAndInvalidUtf8AndKeepsTheRest) {
  EXPECT_EQ(printable("n+1"), "n+1");
  EXPECT_EQ(printable(std::string("\x89PN\0", 4)), "\\x89PN\\x00");
  EXPECT_EQ(printable("a\nb\x7f"), "a\\x0ab\\x7f");
  EXPECT_EQ(printable("caf\xc3\xa9.nii"), "caf\xc3\xa9.nii");          // valid UTF-8 stays
  EXPECT_EQ(printable("\xc3(\xed\xa0\x80"), "\\xc3(\\xed\\xa0\\x80");  // broken, surrogate
  EXPECT_EQ(printable("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");        // 4 bytes
  EXPECT_EQ(printable("\xf0\x9f\x98"), "\\xf0\\x9f\\x98");             // cut short
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

TEST(ValueTextTest, IsTheShortestTextThatReadsBackAsTheValue) {
  EXPECT_EQ(value_text(1.5), "1.5");
  EXPECT_EQ(value_text(0.1), "0.1");
  EXPECT_EQ(value_text(200), "200");
  EXPECT_EQ(value_text(-57), "-57");
  EXPECT_EQ(value_text(1e-5), "1e-05");
  EXPECT_EQ(value_text(std::nan("")), "nan");
  // Values six significant digits cannot tell apart stay apart (cache keys name them).
  EXPECT_EQ(value_text(1.5000001), "1.5000001");
  EXPECT_EQ(std::strtod(value_text(0.1 + 0.2).c_str(), nullptr), 0.1 + 0.2);
}

}  // namespace
}  // namespace volshard
