#include "runtime/accounting.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

namespace attnkit::accounting {
namespace internal {

constinit std::atomic<int> g_active_meters{0};

namespace {

// Each counter on its own cache line: under OpenMP several threads allocate
// at once and false sharing would turn every hook into a line transfer
// (~100 ns on a two-socket part instead of ~5 ns for an uncontended add).
struct alignas(64) Counter {
  std::atomic<int64_t> v{0};
};

constinit Counter g_allocs, g_alloc_bytes, g_frees, g_free_bytes, g_copied,
    g_live;
constinit std::array<Counter, kNumPhases> g_phase_ns{};
constinit std::atomic<bool> g_hooks_installed{false};

// Per-meter live-bytes high-water marks; bit i of g_slot_mask marks slot i in
// use.
constinit std::atomic<uint32_t> g_slot_mask{0};
constinit std::array<Counter, Meter::kMaxMeters> g_slot_peak{};
static_assert(Meter::kMaxMeters <= 32, "g_slot_mask is 32 bits");

void AtomicMax(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v &&
         !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

void OnAllocSlow(int64_t requested_bytes, int64_t usable_bytes) {
  g_allocs.v.fetch_add(1, std::memory_order_relaxed);
  g_alloc_bytes.v.fetch_add(requested_bytes, std::memory_order_relaxed);
  const int64_t live =
      g_live.v.fetch_add(usable_bytes, std::memory_order_relaxed) +
      usable_bytes;
  for (uint32_t m = g_slot_mask.load(std::memory_order_acquire); m != 0;
       m &= m - 1) {
    AtomicMax(g_slot_peak[static_cast<size_t>(__builtin_ctz(m))].v, live);
  }
}

void OnFreeSlow(int64_t usable_bytes) {
  g_frees.v.fetch_add(1, std::memory_order_relaxed);
  g_free_bytes.v.fetch_add(usable_bytes, std::memory_order_relaxed);
  g_live.v.fetch_sub(usable_bytes, std::memory_order_relaxed);
}

void OnCopySlow(int64_t bytes) {
  g_copied.v.fetch_add(bytes, std::memory_order_relaxed);
}

void OnPhaseSlow(int phase, int64_t ns) {
  g_phase_ns[static_cast<size_t>(phase)].v.fetch_add(ns,
                                                     std::memory_order_relaxed);
}

void SetAllocHooksInstalled(bool installed) {
  g_hooks_installed.store(installed, std::memory_order_release);
}

namespace {

Counts Snapshot() {
  Counts c;
  c.allocs = g_allocs.v.load(std::memory_order_relaxed);
  c.bytes_allocated = g_alloc_bytes.v.load(std::memory_order_relaxed);
  c.frees = g_frees.v.load(std::memory_order_relaxed);
  c.bytes_freed = g_free_bytes.v.load(std::memory_order_relaxed);
  c.bytes_copied = g_copied.v.load(std::memory_order_relaxed);
  c.append_ns = g_phase_ns[0].v.load(std::memory_order_relaxed);
  c.attention_ns = g_phase_ns[1].v.load(std::memory_order_relaxed);
  return c;
}

}  // namespace
}  // namespace internal

void RecordRemote(const Counts& c) {
  using namespace internal;
  if (!Active()) return;
  g_allocs.v.fetch_add(c.allocs, std::memory_order_relaxed);
  g_alloc_bytes.v.fetch_add(c.bytes_allocated, std::memory_order_relaxed);
  g_frees.v.fetch_add(c.frees, std::memory_order_relaxed);
  g_free_bytes.v.fetch_add(c.bytes_freed, std::memory_order_relaxed);
  g_copied.v.fetch_add(c.bytes_copied, std::memory_order_relaxed);
  const int64_t before =
      g_live.v.fetch_add(c.live_bytes, std::memory_order_relaxed);
  const int64_t peak = before + std::max<int64_t>(c.peak_live_bytes, 0);
  for (uint32_t m = g_slot_mask.load(std::memory_order_acquire); m != 0;
       m &= m - 1) {
    AtomicMax(g_slot_peak[static_cast<size_t>(__builtin_ctz(m))].v, peak);
  }
}

bool AllocHooksInstalled() {
  return internal::g_hooks_installed.load(std::memory_order_acquire);
}

Meter::Meter() {
  using namespace internal;
  start_live_ = g_live.v.load(std::memory_order_relaxed);
  uint32_t mask = g_slot_mask.load(std::memory_order_relaxed);
  while (true) {
    if (mask == ~uint32_t{0}) break;  // all slots taken: no peak
    const int slot = __builtin_ctz(~mask);
    // The slot's peak starts at the current live bytes before the slot is
    // published, so a concurrent allocation can only raise it.
    g_slot_peak[static_cast<size_t>(slot)].v.store(start_live_,
                                                   std::memory_order_relaxed);
    if (g_slot_mask.compare_exchange_weak(mask, mask | (1u << slot),
                                          std::memory_order_acq_rel)) {
      slot_ = slot;
      break;
    }
  }
  start_ = Snapshot();
  g_active_meters.fetch_add(1, std::memory_order_acq_rel);
}

Meter::~Meter() {
  using namespace internal;
  g_active_meters.fetch_sub(1, std::memory_order_acq_rel);
  if (slot_ >= 0) {
    g_slot_mask.fetch_and(~(1u << slot_), std::memory_order_acq_rel);
  }
}

Counts Meter::Read() const {
  using namespace internal;
  const Counts now = Snapshot();
  Counts d;
  d.allocs = now.allocs - start_.allocs;
  d.bytes_allocated = now.bytes_allocated - start_.bytes_allocated;
  d.frees = now.frees - start_.frees;
  d.bytes_freed = now.bytes_freed - start_.bytes_freed;
  d.bytes_copied = now.bytes_copied - start_.bytes_copied;
  d.append_ns = now.append_ns - start_.append_ns;
  d.attention_ns = now.attention_ns - start_.attention_ns;
  d.live_bytes = g_live.v.load(std::memory_order_relaxed) - start_live_;
  d.peak_live_bytes = slot_ < 0
                          ? -1
                          : g_slot_peak[static_cast<size_t>(slot_)].v.load(
                                std::memory_order_relaxed) -
                                start_live_;
  return d;
}

int64_t PeakResidentBytes() {
  // open/read into a stack buffer: no FILE, so no allocation inside a meter.
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* line = std::strstr(buf, "VmHWM:");
  if (line == nullptr) return -1;
  return std::strtoll(line + 6, nullptr, 10) * 1024;  // reported in kB
}

bool ResetPeakResident() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

}  // namespace attnkit::accounting
