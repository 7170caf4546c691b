#include "volshard/core/large_blocks.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "volshard/core/file_io.h"
#include "volshard/core/limits.h"
#include "volshard/core/mt19937.h"

namespace volshard {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The cache is process-wide: each test turns it on or off and reads the
// counters as differences.
class LargeBlocksTest : public ::testing::Test {
 protected:
  void TearDown() override { enable_large_block_cache(false); }
};

TEST_F(LargeBlocksTest, OffLargeRequestsAreMallocdAndCountNothing) {
  enable_large_block_cache(false);
  const LargeBlockStats before = large_block_stats();
  void* p = allocate_bytes(32 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::memset(p, 7, 32 * kMiB);
  release_bytes(p, 32 * kMiB);
  const LargeBlockStats after = large_block_stats();
  EXPECT_EQ(after.mapped, before.mapped);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
}

// A request no memory can serve (here 2^50 bytes, past any address space)
// ends in an OutOfMemoryError that says its size, with the cache on or off,
// and leaves the counters as they were.
TEST_F(LargeBlocksTest, ARequestThatFailsSaysItsSize) {
  for (const bool on : {false, true}) {
    enable_large_block_cache(on);
    const LargeBlockStats before = large_block_stats();
    try {
      (void)allocate_bytes(size_t{1} << 50);
      ADD_FAILURE() << "1 PB was allocated, cache " << on;
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.bytes(), size_t{1} << 50);
      EXPECT_NE(std::string(e.what()).find("could not allocate 1.1 PB (1125899906842624 bytes)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(large_block_stats().in_use_bytes, before.in_use_bytes);
  }
}

// A released block serves the next request of its size class, or one up to
// 1.25x smaller; not a request it would be more than 1.25x too big for, nor
// one larger than it; requests under 16 MiB never touch it.
TEST_F(LargeBlocksTest, ReusesAReleasedBlockForRequestsItFits) {
  enable_large_block_cache();
  void* p = allocate_bytes(40 * kMiB);
  std::memset(p, 1, 40 * kMiB);
  release_bytes(p, 40 * kMiB);
  const LargeBlockStats s0 = large_block_stats();
  void* same = allocate_bytes(40 * kMiB - 5);
  EXPECT_EQ(same, p);
  release_bytes(same, 40 * kMiB - 5);
  void* smaller = allocate_bytes(33 * kMiB);  // class 34 MiB: 40 <= 1.25 x 34
  EXPECT_EQ(smaller, p);
  release_bytes(smaller, 33 * kMiB);
  void* much_smaller = allocate_bytes(20 * kMiB);  // 40 > 1.25 x 20
  void* larger = allocate_bytes(41 * kMiB);        // class 42 MiB
  EXPECT_NE(much_smaller, p);
  EXPECT_NE(larger, p);
  void* small = allocate_bytes(kMiB);
  const LargeBlockStats s1 = large_block_stats();
  EXPECT_EQ(s1.reused - s0.reused, 2);
  EXPECT_EQ(s1.mapped - s0.mapped, 2);
  EXPECT_EQ(s1.in_use_bytes - s0.in_use_bytes, static_cast<int64_t>((20 + 42) * kMiB));
  for (auto [q, n] : {std::pair{much_smaller, 20 * kMiB}, {larger, 41 * kMiB}, {small, kMiB}})
    release_bytes(q, n);
}

// Over a long random run of requests and releases (sizes 16-60 MiB, up to six
// blocks held): live blocks never overlap (each keeps its own byte pattern),
// and the blocks held and kept stay within twice the peak held (>= 128 MiB).
TEST_F(LargeBlocksTest, LiveBlocksNeverOverlapAndMemoryStaysWithinTwiceThePeak) {
  enable_large_block_cache();
  Mt19937 rng(20261123);
  struct Live {
    uint8_t* p;
    size_t bytes;
    uint8_t pattern;
  };
  std::vector<Live> live;
  for (int op = 0; op < 200; ++op) {
    if (live.size() < 6 && (live.empty() || rng() % 2 == 0)) {
      const size_t bytes = (16 + rng() % 45) * kMiB + rng() % 4096;
      auto* p = static_cast<uint8_t*>(allocate_bytes(bytes));
      const auto pattern = static_cast<uint8_t>(op);
      p[0] = p[bytes / 2] = p[bytes - 1] = pattern;
      live.push_back({p, bytes, pattern});
    } else {
      const size_t k = rng() % live.size();
      const Live l = live[k];
      ASSERT_EQ(l.p[0], l.pattern) << "op " << op;
      ASSERT_EQ(l.p[l.bytes / 2], l.pattern) << "op " << op;
      ASSERT_EQ(l.p[l.bytes - 1], l.pattern) << "op " << op;
      release_bytes(l.p, l.bytes);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    const LargeBlockStats s = large_block_stats();
    ASSERT_LE(s.in_use_bytes + s.free_bytes, 2 * std::max<int64_t>(s.peak_in_use_bytes, 128 * kMiB))
        << "op " << op;
  }
  for (const Live& l : live) release_bytes(l.p, l.bytes);
  EXPECT_GT(large_block_stats().reused, 0);
}

TEST_F(LargeBlocksTest, ThreadsGetDisjointBlocks) {
  enable_large_block_cache();
  std::vector<std::thread> threads;
  std::vector<int> corrupt(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &corrupt] {
      for (int k = 0; k < 12; ++k) {
        const size_t bytes = (16 + static_cast<size_t>((t + k) % 3) * 4) * kMiB;
        auto* p = static_cast<uint8_t*>(allocate_bytes(bytes));
        const auto mark = static_cast<uint8_t>(t * 16 + k);
        std::memset(p, mark, bytes);
        std::this_thread::yield();
        corrupt[static_cast<size_t>(t)] += p[0] != mark || p[bytes - 1] != mark;
        release_bytes(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(corrupt[static_cast<size_t>(t)], 0) << "thread " << t;
}

// fork() while another thread takes and gives blocks back (a torch
// DataLoader forking its workers beside running loader threads): every child
// can still take a block, as the cache's lock is never inherited held.
TEST_F(LargeBlocksTest, ForkedChildrenCanTakeBlocksWhileAThreadChurns) {
  enable_large_block_cache();
  std::atomic<bool> stop{false};
  std::thread churn([&stop] {
    while (!stop.load()) release_bytes(allocate_bytes(16 * kMiB), 16 * kMiB);
  });
  int stuck_or_failed = 0;
  for (int k = 0; k < 20; ++k) {
    const pid_t child = ::fork();
    if (child == 0) {
      // A child that deadlocks dies of SIGALRM. Not 2 s, as it was: a child
      // on a loaded machine (a CI run beside a 7 GiB test) took that long.
      ::alarm(120);
      void* p = allocate_bytes(24 * kMiB);
      static_cast<char*>(p)[0] = 1;
      release_bytes(p, 24 * kMiB);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    stuck_or_failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (stuck_or_failed > 0) break;
  }
  stop = true;
  churn.join();
  EXPECT_EQ(stuck_or_failed, 0);
}

// A NIfTI reader's buffer: with the cache on, the next volume's buffer of the
// same size is the same memory (no page faults, no heap growth).
TEST_F(LargeBlocksTest, ByteBuffersOfAVolumesSizeAreReused) {
  enable_large_block_cache();
  const void* first = nullptr;
  {
    ByteBuffer b = ByteBuffer::allocate(100 * kMiB + 352);
    first = b.data.get();
  }
  ByteBuffer again = ByteBuffer::allocate(100 * kMiB + 352);
  EXPECT_EQ(again.data.get(), first);
  ByteBuffer empty = ByteBuffer::allocate(0);
  EXPECT_NE(empty.data.get(), nullptr);
}

}  // namespace
}  // namespace volshard
