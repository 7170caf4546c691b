#include "volshard/core/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace volshard {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ProgressTest, ReadableSecondsPicksAUnitAPersonReads) {
  EXPECT_EQ(readable_seconds(0.00085), "850 us");
  EXPECT_EQ(readable_seconds(0.0123), "12.3 ms");
  EXPECT_EQ(readable_seconds(4.561), "4.56 s");
  EXPECT_EQ(readable_seconds(125), "2 min 05 s");
  EXPECT_EQ(duration_text(3725), "1:02:05");
}

TEST(ProgressTest, WithoutATerminalPrintsTimestampedLinesAndALastOne) {
  ::unsetenv("VOLSHARD_PROGRESS_SECONDS");
  ::testing::internal::CaptureStderr();
  {
    Progress p("caching", 4, "volumes", ProgressStyle::kLines, 0);
    for (int i = 1; i <= 4; ++i) p.update(i);
  }
  const auto lines = lines_of(::testing::internal::GetCapturedStderr());
  // One per update (interval 0) but the one that completes it: the last line
  // says it once (a log showed 4/4 twice, with an ETA and without).
  ASSERT_EQ(lines.size(), 4u);
  const std::regex line(
      R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\] caching: \d/4 volumes \(\d+%\), \d:\d\d:\d\d elapsed.*)");
  for (const auto& l : lines) EXPECT_TRUE(std::regex_match(l, line)) << l;
  EXPECT_THAT(lines[0], HasSubstr("1/4 volumes (25%)"));
  EXPECT_THAT(lines[0], HasSubstr("ETA"));
  EXPECT_THAT(lines[3], HasSubstr("4/4 volumes (100%)"));
  EXPECT_THAT(lines[3], ::testing::Not(HasSubstr("ETA")));
  EXPECT_THAT(lines[2], HasSubstr("3/4 volumes"));
}

TEST(ProgressTest, LinesWaitForTheIntervalAndABarRewritesOneLine) {
  ::unsetenv("VOLSHARD_PROGRESS_SECONDS");
  ::testing::internal::CaptureStderr();
  {
    Progress p("validation", 100, "volumes", ProgressStyle::kLines, 3600);
    for (int i = 1; i < 100; ++i) p.update(i);
  }
  EXPECT_EQ(lines_of(::testing::internal::GetCapturedStderr()).size(), 1u);  // the last only
  ::testing::internal::CaptureStderr();
  {
    Progress p("caching", 2, "volumes", ProgressStyle::kBar);
    p.update(2);
  }
  const std::string bar = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(bar, HasSubstr("\rcaching [########################] 2/2 volumes (100%)"));
  EXPECT_EQ(bar.back(), '\n');
  ::testing::internal::CaptureStderr();
  { Progress p("off", 2, "volumes", ProgressStyle::kOff); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(ProgressTest, TheEnvironmentSetsTheInterval) {
  ::setenv("VOLSHARD_PROGRESS_SECONDS", "0", 1);
  ::testing::internal::CaptureStderr();
  {
    Progress p("caching", 3, "volumes", ProgressStyle::kLines, 3600);
    p.update(1);
    p.update(2);
  }
  ::unsetenv("VOLSHARD_PROGRESS_SECONDS");
  EXPECT_EQ(lines_of(::testing::internal::GetCapturedStderr()).size(), 3u);
}

}  // namespace
}  // namespace volshard
