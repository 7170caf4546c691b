#include "volshard/core/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace volshard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("volshard_file_io_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("VOLSHARD_INJECT_WRITE_FAILURE");
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(FileIoTest, AtomicWriteReplacesTheFileAndReadGivesItBack) {
  write_string_atomic(path("a.txt"), "first");
  write_string_atomic(path("a.txt"), "second, longer");
  EXPECT_EQ(read_text_file(path("a.txt")), "second, longer");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FileIoTest, InjectedDiskFullLeavesTheOldFileAndNoTemporary) {
  write_string_atomic(path("keep.txt"), "old contents");
  ::setenv("VOLSHARD_INJECT_WRITE_FAILURE", "keep.txt:enospc", 1);
  try {
    write_string_atomic(path("keep.txt"), std::string(1000, 'x'));
    FAIL() << "expected the injected failure";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("keep.txt")));
    EXPECT_THAT(e.what(), HasSubstr("(injected)"));
  }
  ::unsetenv("VOLSHARD_INJECT_WRITE_FAILURE");
  EXPECT_EQ(read_text_file(path("keep.txt")), "old contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FileIoTest, ReadingAMissingFileOrAFolderNamesThePath) {
  try {
    read_file(path("missing.bin"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("missing.bin") + ": cannot open: No such file"));
  }
  try {
    read_file(dir_.string());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(": not a regular file"));
  }
}

TEST_F(FileIoTest, ReadExactlyReportsWhereAShortFileEnded) {
  write_string_atomic(path("short.bin"), "12345");
  const Fd fd = open_for_reading(path("short.bin"), nullptr);
  uint8_t buffer[8];
  try {
    read_exactly(fd.get(), buffer, 8, 0, path("short.bin"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ended after 5 bytes"));
  }
}

TEST_F(FileIoTest, LineFileAppendsWholeLinesAndTruncatesOnRequest) {
  {
    LineFile f(path("log.jsonl"), true);
    f.write("{\"a\":1}\n");
  }
  {
    LineFile f(path("log.jsonl"), false);
    f.write("{\"a\":2}\n");
  }
  EXPECT_EQ(read_text_file(path("log.jsonl")), "{\"a\":1}\n{\"a\":2}\n");
  LineFile(path("log.jsonl"), true);
  EXPECT_EQ(read_text_file(path("log.jsonl")), "");
}

TEST(FdTest, MovingTransfersOwnershipAndResetCloses) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  Fd a(fds[0]);
  Fd b(std::move(a));
  EXPECT_FALSE(a.is_open());
  EXPECT_EQ(b.get(), fds[0]);
  b.reset();
  EXPECT_NE(::close(fds[0]), 0);  // already closed by reset
  ::close(fds[1]);
}

}  // namespace
}  // namespace volshard
