// FolderLock: one process at a time in a run folder; a lock whose holder is
// gone (on this machine) or silent (on another) is taken over.
#include "volshard/core/folder_lock.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "volshard/core/field.h"
#include "volshard/core/file_io.h"

namespace volshard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FolderLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("volshard_lock_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string lock_file() const { return (dir_ / "run.lock").string(); }
  // A lock file as another holder would have written it.
  void write_lock(const std::string& host, int64_t pid, const std::string& boot, double age_s) {
    fs::create_directories(dir_);
    std::ofstream(lock_file()) << "host=" << host << "\npid=" << pid
                               << "\nstarted=2026-11-26T00:00:00Z\ncommand=volshard train --out "
                                  "twin\nboot_id="
                               << boot << "\nproc_start=1\n";
    const timespec then{::time(nullptr) - static_cast<time_t>(age_s), 0};
    const timespec times[2] = {then, then};
    ::utimensat(AT_FDCWD, lock_file().c_str(), times, 0);
  }
  static std::string here() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
  }
  static std::string boot() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
  }
  fs::path dir_;
};

TEST_F(FolderLockTest, ASecondHolderIsRefusedNamingTheFirstUntilItLetsGo) {
  {
    const FolderLock first = FolderLock::acquire(dir_.string(), "volshard train");
    const auto held = FolderLock::holder(dir_.string());
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->pid, ::getpid());
    try {
      (void)FolderLock::acquire(dir_.string(), "volshard train");
      FAIL() << "a second holder was let in";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("is held by a run: host " + here() + ", pid " +
                                      std::to_string(::getpid()) + " (volshard train), started "));
      EXPECT_THAT(e.what(), HasSubstr("give another out"));  // by key; a command line: --out
      EXPECT_THAT(flag_text(e), HasSubstr("give another --out"));
    }
  }
  EXPECT_FALSE(fs::exists(lock_file()));  // let go with its holder
  const FolderLock again = FolderLock::acquire(dir_.string(), "volshard train");
  EXPECT_TRUE(fs::exists(lock_file()));
}

TEST_F(FolderLockTest, ALockWhoseProcessIsGoneIsTakenOver) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that no process has now
  write_lock(here(), child, boot(), 0);
  const FolderLock taken = FolderLock::acquire(dir_.string(), "volshard train");
  EXPECT_EQ(FolderLock::holder(dir_.string())->pid, ::getpid());
}

TEST_F(FolderLockTest, ALockOfAProcessStartedBeforeARebootIsTakenOver) {
  write_lock(here(), ::getppid(), "another-boot", 0);  // a live pid, but of an earlier boot
  const FolderLock taken = FolderLock::acquire(dir_.string(), "volshard train");
  EXPECT_EQ(FolderLock::holder(dir_.string())->pid, ::getpid());
}

TEST_F(FolderLockTest, AnotherMachinesLockHoldsWhileRefreshedAndIsTakenOverWhenSilent) {
  write_lock("another-host", 4242, "their-boot", 5);
  try {
    (void)FolderLock::acquire(dir_.string(), "volshard train");
    FAIL() << "a lock refreshed 5 s ago on another machine was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("host another-host, pid 4242 (volshard train --out twin)"));
  }
  write_lock("another-host", 4242, "their-boot", FolderLock::kStaleSeconds + 30);
  const FolderLock taken = FolderLock::acquire(dir_.string(), "volshard train");
  EXPECT_EQ(FolderLock::holder(dir_.string())->host, here());
}

TEST_F(FolderLockTest, AFolderThatCannotBeMadeIsNamed) {
  fs::create_directories(dir_);
  std::ofstream((dir_ / "a_file").string()) << "x";
  try {
    (void)FolderLock::acquire((dir_ / "a_file" / "run").string(), "volshard train");
    FAIL() << "a folder under a file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir_ / "a_file" / "run").string() + ": cannot create"));
  }
}

}  // namespace
}  // namespace volshard
