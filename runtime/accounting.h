// Meters for what a decode step costs besides arithmetic: heap allocations
// (count, bytes, high-water of live bytes), bytes copied by KV updates, and
// wall time split into append and attention.
//
// The counters are process-wide atomics (every thread, so OpenMP workers'
// allocations count too). They only move while at least one Meter is alive:
// with none, a hook costs one relaxed load and a predictable branch, which is
// what "~zero cost when off" means here (~1 ns next to malloc's ~20 ns;
// 2-core AMD EPYC Zen 5 family 26, GCC 12.2, 2026-11-21).
//
// Where the numbers come from:
//   - Allocations: runtime/alloc_hooks.cc interposes operator new/delete (all
//     forms) and the malloc family. It is linked only into binaries that
//     measure (CMake target attnkit_alloc_hooks); elsewhere
//     AllocHooksInstalled() is false and allocation counts stay 0. Under
//     AddressSanitizer the sanitizer's own allocation hooks are used instead
//     (ASan owns malloc).
//   - Allocators the hooks cannot see (a JIT's private arena, memory mapped
//     directly) report through RecordAlloc/RecordFree. Code that allocates
//     with malloc/new must NOT also call RecordAlloc when the hooks are
//     installed, or it is counted twice.
//   - Bytes copied: every KV-update copy path (AppendKvStrided, a backend's
//     own append kernel, reference::ConcatKv) calls RecordCopy once with the
//     bytes it wrote.
#ifndef ATTNKIT_RUNTIME_ACCOUNTING_H_
#define ATTNKIT_RUNTIME_ACCOUNTING_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace attnkit::accounting {

namespace internal {
// Number of live Meters. constinit: the allocation hooks may run before
// dynamic initialisation.
extern constinit std::atomic<int> g_active_meters;
void OnAllocSlow(int64_t requested_bytes, int64_t usable_bytes);
void OnFreeSlow(int64_t usable_bytes);
void OnCopySlow(int64_t bytes);
void OnPhaseSlow(int phase, int64_t ns);
void SetAllocHooksInstalled(bool installed);

inline bool Active() {
  return g_active_meters.load(std::memory_order_relaxed) != 0;
}
// Called by the hooks: `usable_bytes` is what the allocator really reserved
// (malloc_usable_size), used for the live-bytes high-water mark.
inline void OnAlloc(int64_t requested_bytes, int64_t usable_bytes) {
  if (Active()) OnAllocSlow(requested_bytes, usable_bytes);
}
inline void OnFree(int64_t usable_bytes) {
  if (Active()) OnFreeSlow(usable_bytes);
}
}  // namespace internal

// An allocation / release the interposed hooks cannot see (see above).
inline void RecordAlloc(int64_t bytes) { internal::OnAlloc(bytes, bytes); }
inline void RecordFree(int64_t bytes) { internal::OnFree(bytes); }

// Bytes written by a KV-cache update (old context re-copied plus new tokens).
inline void RecordCopy(int64_t bytes) {
  if (internal::Active()) internal::OnCopySlow(bytes);
}

struct Counts;
// What a backend's worker process (backends/remote.h) counted during one
// call, added to this process's counters as if it had happened here:
// allocations, frees, bytes copied and the net live bytes; the call's own
// peak (c.peak_live_bytes above the worker's live bytes at its start) raises
// every meter's peak above this process's live bytes. No-op with no Meter.
void RecordRemote(const Counts& c);

// True when this binary links attnkit_alloc_hooks (allocation counts are
// real); false means they read 0 because nothing is counting.
bool AllocHooksInstalled();

enum class Phase : int { kAppend = 0, kAttention = 1 };
inline constexpr int kNumPhases = 2;

// Adds the wall time of its scope to `phase` (when a Meter is alive).
class ScopedPhase {
 public:
  explicit ScopedPhase(Phase phase)
      : phase_(phase), start_(std::chrono::steady_clock::now()) {}
  ~ScopedPhase() {
    if (!internal::Active()) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start_)
                        .count();
    internal::OnPhaseSlow(static_cast<int>(phase_), ns);
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Phase phase_;
  std::chrono::steady_clock::time_point start_;
};

// What happened (process-wide) since a Meter started.
struct Counts {
  int64_t allocs = 0;           // allocation calls (realloc counts as one)
  int64_t bytes_allocated = 0;  // bytes requested by them
  int64_t frees = 0;
  int64_t bytes_freed = 0;  // usable bytes released
  int64_t bytes_copied = 0;
  int64_t append_ns = 0;
  int64_t attention_ns = 0;
  // Heap bytes allocated minus heap bytes freed since the meter started (can
  // be negative when older memory was released).
  int64_t live_bytes = 0;
  // High-water mark of (heap bytes allocated - heap bytes freed) since the
  // meter started: the extra memory the measured code held at its worst.
  // -1 when more than kMaxMeters meters were alive at once.
  int64_t peak_live_bytes = 0;
};

// RAII: counting runs while any Meter is alive; Read() returns the deltas
// since this one started. Meters nest and may live on different threads.
// Construction and Read() do not allocate.
class Meter {
 public:
  static constexpr int kMaxMeters = 32;  // with a live-bytes peak of their own

  Meter();
  ~Meter();
  Meter(const Meter&) = delete;
  Meter& operator=(const Meter&) = delete;

  Counts Read() const;

 private:
  Counts start_{};
  int64_t start_live_ = 0;
  int slot_ = -1;
};

// Peak resident set size of the process (VmHWM), in bytes; -1 if unknown.
// ResetPeakResident() restarts it from the current RSS (Linux
// /proc/self/clear_refs); false if the kernel refused.
int64_t PeakResidentBytes();
bool ResetPeakResident();

}  // namespace attnkit::accounting

#endif  // ATTNKIT_RUNTIME_ACCOUNTING_H_
