#include "runtime/accounting.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

namespace attnkit::accounting {
namespace {

// Keeps the compiler from eliding a new/delete pair (allowed since C++14).
void Escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

TEST(AccountingTest, HooksAreLinkedIntoThisBinary) {
  EXPECT_TRUE(AllocHooksInstalled());
}

TEST(AccountingTest, CountsEveryFormOfOperatorNew) {
  Counts c;
  {
    Meter m;
    int* a = new int[1000];
    Escape(a);
    delete[] a;
    double* b = new double(1.0);
    Escape(b);
    delete b;
    auto* c3 = new (std::nothrow) char[77];
    Escape(c3);
    delete[] c3;
    void* d = ::operator new (300, std::align_val_t{256});
    Escape(d);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);
    ::operator delete (d, 300, std::align_val_t{256});
    void* e = ::operator new(50);
    Escape(e);
    ::operator delete(e, 50);
    c = m.Read();
  }
  EXPECT_EQ(c.allocs, 5);
  EXPECT_EQ(c.bytes_allocated, 4000 + 8 + 77 + 300 + 50);
  EXPECT_EQ(c.frees, 5);
  EXPECT_EQ(c.live_bytes, 0);
  EXPECT_GE(c.peak_live_bytes, 4000);
}

TEST(AccountingTest, CountsTheMallocFamily) {
  Counts c;
  {
    Meter m;
    void* a = std::malloc(100);
    Escape(a);
    void* b = std::calloc(10, 30);
    Escape(b);
    a = std::realloc(a, 5000);  // one allocation + one release
    Escape(a);
    void* d = std::aligned_alloc(64, 640);
    Escape(d);
    void* e = nullptr;
    ASSERT_EQ(posix_memalign(&e, 128, 1000), 0);
    Escape(e);
    void* f = memalign(32, 64);
    Escape(f);
    for (void* p : {a, b, d, e, f}) std::free(p);
    c = m.Read();
  }
  EXPECT_EQ(c.allocs, 6);
  EXPECT_EQ(c.bytes_allocated, 100 + 300 + 5000 + 640 + 1000 + 64);
  EXPECT_EQ(c.frees, 6);
  EXPECT_EQ(c.live_bytes, 0);
}

TEST(AccountingTest, NothingCountsWithoutAMeterAndMetersNest) {
  void* before = std::malloc(1 << 20);
  Escape(before);
  RecordCopy(12345);
  Counts outer, inner;
  {
    Meter m1;
    void* p = std::malloc(4096);
    Escape(p);
    {
      Meter m2;
      void* q = std::malloc(8192);
      Escape(q);
      RecordCopy(10);
      std::free(q);
      inner = m2.Read();
    }
    RecordCopy(5);
    std::free(p);
    std::free(before);  // released inside, allocated outside
    outer = m1.Read();
  }
  EXPECT_EQ(inner.allocs, 1);
  EXPECT_EQ(inner.bytes_copied, 10);
  EXPECT_GE(inner.peak_live_bytes, 8192);
  EXPECT_EQ(outer.allocs, 2);
  EXPECT_EQ(outer.bytes_allocated, 4096 + 8192);
  EXPECT_EQ(outer.bytes_copied, 15);
  // The 1 MiB block was allocated before the meter: its release makes live
  // bytes negative and the peak is what was allocated on top of the start.
  EXPECT_LT(outer.live_bytes, -(1 << 19));
  EXPECT_GE(outer.peak_live_bytes, 4096 + 8192);
  EXPECT_LT(outer.peak_live_bytes, 1 << 19);
}

TEST(AccountingTest, PeakIsTheHighWaterMarkNotTheTotal) {
  Counts c;
  {
    Meter m;
    for (int i = 0; i < 10; ++i) {
      void* p = std::malloc(100000);
      Escape(p);
      std::free(p);
    }
    c = m.Read();
  }
  EXPECT_EQ(c.bytes_allocated, 1000000);
  EXPECT_GE(c.peak_live_bytes, 100000);
  EXPECT_LT(c.peak_live_bytes, 200000);
}

TEST(AccountingTest, ExternalAllocatorsReportThroughRecordAlloc) {
  Counts c;
  {
    Meter m;
    RecordAlloc(1 << 20);
    RecordFree(1 << 20);
    c = m.Read();
  }
  EXPECT_EQ(c.allocs, 1);
  EXPECT_EQ(c.bytes_allocated, 1 << 20);
  EXPECT_EQ(c.peak_live_bytes, 1 << 20);
  EXPECT_EQ(c.live_bytes, 0);
}

// Lost updates would show as fewer allocations than the threads made.
TEST(AccountingTest, CountsAllocationsOfEveryThreadExactly) {
  constexpr int kThreads = 4, kAllocs = 5000;
  std::atomic<bool> go{false}, exit{false};
  std::atomic<int> ready{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // Thread start-up allocates (TLS, sanitizer state): before the meter.
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kAllocs; ++i) {
        void* p = std::malloc(16);
        Escape(p);
        std::free(p);
      }
      done.fetch_add(1);
      // Thread exit frees thread-local state: not part of the count.
      while (!exit.load()) std::this_thread::yield();
    });
  }
  while (ready.load() < kThreads) std::this_thread::yield();
  Counts c;
  {
    Meter m;
    go.store(true);
    while (done.load() < kThreads) std::this_thread::yield();
    c = m.Read();
  }
  exit.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.allocs, kThreads * kAllocs);
  EXPECT_EQ(c.frees, kThreads * kAllocs);
  EXPECT_EQ(c.bytes_allocated, int64_t{kThreads} * kAllocs * 16);
}

TEST(AccountingTest, PhasesAddWallTime) {
  Counts c;
  {
    Meter m;
    {
      ScopedPhase p(Phase::kAppend);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    c = m.Read();
  }
  EXPECT_GE(c.append_ns, 2'000'000);
  EXPECT_EQ(c.attention_ns, 0);
}

TEST(AccountingTest, MoreMetersThanSlotsStillCount) {
  std::vector<std::unique_ptr<Meter>> meters;
  for (int i = 0; i < Meter::kMaxMeters + 2; ++i) {
    meters.push_back(std::make_unique<Meter>());
  }
  RecordCopy(3);
  EXPECT_EQ(meters.back()->Read().bytes_copied, 3);
  EXPECT_EQ(meters.back()->Read().peak_live_bytes, -1);
  EXPECT_GE(meters.front()->Read().peak_live_bytes, 0);
}

TEST(AccountingTest, PeakResidentIsReadable) {
  EXPECT_GT(PeakResidentBytes(), 0);
}

}  // namespace
}  // namespace attnkit::accounting
