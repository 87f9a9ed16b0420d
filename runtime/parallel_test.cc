#include "runtime/parallel.h"

#include <gtest/gtest.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/accounting.h"

namespace attnkit {
namespace {

TEST(ForEachItemTest, VisitsEveryItemExactlyOnce) {
  for (int threads : {0, 1, 2, 3, 8}) {
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      const int team =
          static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
      std::atomic<int> bad_thread{0};
      ForEachItem(n, threads, [&](int64_t item, int thread) {
        visits[static_cast<size_t>(item)].fetch_add(1);
        if (thread < 0 || thread >= team) bad_thread.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(visits[static_cast<size_t>(i)].load(), 1)
            << "item " << i << " of n=" << n << " threads=" << threads;
      }
      EXPECT_EQ(bad_thread.load(), 0) << "n=" << n << " threads=" << threads;
    }
  }
}

// No two concurrent calls share a thread index: per-thread scratch indexed
// by it is never written by two threads at once.
TEST(ForEachItemTest, ThreadIndexIsExclusive) {
  constexpr int kThreads = 4;
  std::atomic<int> busy[kThreads] = {};
  std::atomic<int> clashes{0};
  ForEachItem(400, kThreads, [&](int64_t, int thread) {
    if (busy[thread].fetch_add(1) != 0) clashes.fetch_add(1);
    std::this_thread::yield();
    busy[thread].fetch_sub(1);
  });
  EXPECT_EQ(clashes.load(), 0);
}

TEST(ForEachItemTest, SerialRunsOnTheCallingThreadInOrder) {
  const std::thread::id caller = std::this_thread::get_id();
  for (auto [n, threads] : {std::pair<int64_t, int>{5, 1}, {5, 0}, {1, 8}}) {
    std::vector<int64_t> order;
    bool elsewhere = false;
    ForEachItem(n, threads, [&](int64_t item, int thread) {
      order.push_back(item);
      if (std::this_thread::get_id() != caller || thread != 0) {
        elsewhere = true;
      }
    });
    EXPECT_FALSE(elsewhere) << "n=" << n << " threads=" << threads;
    ASSERT_EQ(order.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(order[i], i);
  }
}

// The decode path's contract: once the team exists, handing out items costs
// no heap allocation, parallel or serial.
TEST(ForEachItemTest, WarmCallDoesNotAllocate) {
  ASSERT_TRUE(accounting::AllocHooksInstalled());
  std::atomic<int64_t> sum{0};
  auto add = [&](int64_t item, int) { sum.fetch_add(item); };
  for (int threads : {1, 2, 4}) {
    ForEachItem(16, threads, add);  // warm-up: creates the team
    accounting::Counts c;
    {
      accounting::Meter meter;
      ForEachItem(16, threads, add);
      ForEachItem(1, threads, add);
      c = meter.Read();
    }
    EXPECT_EQ(c.allocs, 0) << "threads=" << threads;
  }
  EXPECT_EQ(sum.load(), 3 * (2 * 120));
}

TEST(ForEachItemTest, MaxThreadsIsPositive) { EXPECT_GE(MaxThreads(), 1); }

// compiled/CMakeLists.txt runs this binary a second time with LLVM's
// libgomp.so.1 (libomp) first on the library path, the runtime every binary
// linking MLIR gets, and sets ATTNKIT_EXPECT_OPENMP_DIR to its directory:
// this proves that run really tested libomp rather than GNU libgomp.
TEST(ForEachItemTest, RunsOnTheExpectedOpenMpRuntime) {
  const char* want = std::getenv("ATTNKIT_EXPECT_OPENMP_DIR");
  if (want == nullptr) GTEST_SKIP() << "ATTNKIT_EXPECT_OPENMP_DIR not set";
  std::string loaded;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libgomp.so") != std::string::npos) {
          *static_cast<std::string*>(out) = name;
        }
        return 0;
      },
      &loaded);
  EXPECT_EQ(loaded.rfind(want, 0), 0u)
      << "libgomp.so.1 loaded from '" << loaded << "', expected under " << want;
}

}  // namespace
}  // namespace attnkit
