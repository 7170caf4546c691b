// parallel_items: every item once, the first error after every thread has
// stopped, a stop that stops them all, and no std::terminate when the system
// refuses threads.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "volshard/core/parallel.h"

namespace volshard {
namespace {

TEST(ParallelItemsTest, RunsEveryItemOnceForAnyThreadCount) {
  for (const int64_t threads : {1, 2, 3, 8, 40}) {
    std::vector<std::atomic<int>> runs(37);
    std::vector<int64_t> reported;
    parallel_items(
        37, threads,
        [&](int64_t i) {
          ++runs[static_cast<size_t>(i)];
          return true;
        },
        [&](int64_t done, int64_t count) {
          EXPECT_EQ(count, 37);
          reported.push_back(done);  // one call at a time: no lock needed here
        });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i], 1) << "item " << i;
    ASSERT_EQ(reported.size(), 37u) << threads;
    for (size_t k = 0; k < reported.size(); ++k)
      EXPECT_EQ(reported[k], static_cast<int64_t>(k + 1));
  }
  parallel_items(0, 4, [](int64_t) -> bool { throw std::logic_error("no item to run"); });
}

TEST(ParallelItemsTest, TheFirstErrorIsRethrownAfterEveryThreadStopped) {
  for (const int64_t threads : {1, 4}) {
    std::atomic<int64_t> ran{0};
    try {
      parallel_items(1000, threads, [&](int64_t i) {
        ++ran;
        if (i == 5) throw std::runtime_error("item 5 failed");
        return true;
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "item 5 failed");
    }
    if (threads == 1) {
      EXPECT_EQ(ran.load(), 6);  // no item after the failing one
    }
  }
}

TEST(ParallelItemsTest, FalseStopsEveryThreadFromTakingMore) {
  std::atomic<int64_t> ran{0};
  parallel_items(1000, 1, [&](int64_t i) {
    ++ran;
    return i < 9;
  });
  EXPECT_EQ(ran.load(), 10);
}

// With RLIMIT_NPROC at 1 the kernel refuses every new thread (EAGAIN): the
// calling thread then runs all items itself. Before, the std::thread that
// had started was destroyed joinable: "terminate called without an active
// exception". Needs root to become another user whose limit can be set.
TEST(ParallelItemsTest, RefusedThreadsLeaveTheirItemsToTheCaller) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run as nobody with RLIMIT_NPROC 1";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    const rlimit one{1, 1};
    if (setrlimit(RLIMIT_NPROC, &one) != 0) _exit(4);
    std::atomic<int64_t> ran{0};
    parallel_items(100, 8, [&](int64_t) {
      ++ran;
      return true;
    });
    _exit(ran == 100 ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace volshard
