// field.cpp: a table row's bounds, and library messages that name a field by
// its key while a command line shows its flag.
#include "volshard/core/field.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "volshard/core/error.h"

namespace volshard {
namespace {

using ::testing::HasSubstr;

TEST(FieldTest, ABoundNamesTheKeyAndACommandLineTheFlag) {
  const Field f = Field("num_samples", "crops per volume").at_least(1).at_most(4096);
  EXPECT_NO_THROW(f.check(4096, "4096", "Loader"));
  try {
    f.check(5000, "5000", "Loader");
    FAIL() << "5000 passed [1, 4096]";
  } catch (const FieldError& e) {
    EXPECT_STREQ(e.what(), "Loader: num_samples=5000 must be in [1, 4096]");
    EXPECT_EQ(e.flag_text(), "Loader: --num-samples=5000 must be in [1, 4096]");
  }
  Field weights("model_path", "the weights");
  weights.flag_name = "--model";
  weights.at_least(0);
  try {
    weights.check(-1, "-1", "");
    FAIL() << "-1 passed >= 0";
  } catch (const std::invalid_argument& e) {  // a FieldError is one
    EXPECT_STREQ(e.what(), "model_path=-1 must be >= 0");
    EXPECT_EQ(flag_text(e), "--model=-1 must be >= 0") << "the row's own flag";
  }
}

// A message that quotes another keeps its fields (quoted): the flags come
// through to the command line however deep the field was named.
TEST(FieldTest, AQuotedFieldKeepsItsFlagThroughAnotherMessage) {
  try {
    try {
      check_edges({32, 32}, field_ref("crop"), 1, 4096);
      FAIL() << "two edges passed";
    } catch (const std::invalid_argument& e) {
      throw FieldError("train: " + quoted(e) + " (with " + field_ref("a_min") + ")");
    }
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("train: crop=32,32 must be one edge"));
    EXPECT_THAT(e.what(), HasSubstr("(with a_min)"));
    EXPECT_THAT(flag_text(e), HasSubstr("train: --crop=32,32 must be one edge"));
    EXPECT_THAT(flag_text(e), HasSubstr("(with --a-min)"));
    EXPECT_EQ(std::string(e.what()).find('\x1f'), std::string::npos) << "no mark is shown";
  }
  // A message without fields, or an exception of another kind, reads the same both ways.
  const std::runtime_error plain("disk full");
  EXPECT_EQ(flag_text(plain), "disk full");
  EXPECT_EQ(quoted(plain), "disk full");
  EXPECT_EQ(FieldError("no field here").flag_text(), "no field here");
}

}  // namespace
}  // namespace volshard
