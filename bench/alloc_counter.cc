#include "bench/alloc_counter.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

// Sanitizers interpose malloc themselves; defining it here as well would
// replace theirs. Then only operator new is counted.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNKIT_COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define ATTNKIT_COUNT_MALLOC 0
#endif
#endif
#ifndef ATTNKIT_COUNT_MALLOC
#if defined(__GLIBC__)
#define ATTNKIT_COUNT_MALLOC 1
#else
#define ATTNKIT_COUNT_MALLOC 0
#endif
#endif

namespace attnkit::bench {
namespace {
// Relaxed: the counts are read between steps on the benchmark thread, after
// the OpenMP barrier that ends every parallel region (which orders them).
std::atomic<uint64_t> g_allocations{0};
std::atomic<uint64_t> g_bytes{0};

inline void Count(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(n, std::memory_order_relaxed);
}
}  // namespace

AllocSnapshot AllocationsSoFar() {
  return {g_allocations.load(std::memory_order_relaxed),
          g_bytes.load(std::memory_order_relaxed)};
}

bool CountsMalloc() { return ATTNKIT_COUNT_MALLOC != 0; }

}  // namespace attnkit::bench

#if ATTNKIT_COUNT_MALLOC
// glibc exports its allocator under __libc_* names; a program may define
// malloc and friends and forward to them (the documented way to replace
// malloc: every call in the process, libstdc++'s operator new included, then
// resolves to these definitions).
extern "C" {
void* __libc_malloc(size_t n);
void* __libc_calloc(size_t count, size_t n);
void* __libc_realloc(void* p, size_t n);
void* __libc_memalign(size_t alignment, size_t n);
void* __libc_valloc(size_t n);
void* __libc_pvalloc(size_t n);
void __libc_free(void* p);

void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  if (p != nullptr) attnkit::bench::Count(n);
  return p;
}
void* calloc(size_t count, size_t n) {
  void* p = __libc_calloc(count, n);
  if (p != nullptr) attnkit::bench::Count(count * n);
  return p;
}
void* realloc(void* old, size_t n) {
  void* p = __libc_realloc(old, n);
  if (p != nullptr && n > 0) attnkit::bench::Count(n);
  return p;
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t alignment, size_t n) {
  void* p = __libc_memalign(alignment, n);
  if (p != nullptr) attnkit::bench::Count(n);
  return p;
}
void* aligned_alloc(size_t alignment, size_t n) {
  return memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    return EINVAL;
  }
  void* p = memalign(alignment, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) {
  void* p = __libc_valloc(n);
  if (p != nullptr) attnkit::bench::Count(n);
  return p;
}
void* pvalloc(size_t n) {
  void* p = __libc_pvalloc(n);
  if (p != nullptr) attnkit::bench::Count(n);
  return p;
}
}  // extern "C"
#endif

// operator new: with malloc counted, forwarding to it counts once; otherwise
// count here.
namespace {
void* CountedNew(size_t n, size_t alignment) {
  if (n == 0) n = 1;
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(
                      alignment, (n + alignment - 1) / alignment * alignment);
#if !ATTNKIT_COUNT_MALLOC
  if (p != nullptr) attnkit::bench::Count(n);
#endif
  return p;
}
void* NewOrThrow(size_t n, size_t alignment) {
  void* p = CountedNew(n, alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return NewOrThrow(n, 0); }
void* operator new[](size_t n) { return NewOrThrow(n, 0); }
void* operator new(size_t n, std::align_val_t a) {
  return NewOrThrow(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a) {
  return NewOrThrow(n, static_cast<size_t>(a));
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return CountedNew(n, 0);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return CountedNew(n, 0);
}
void* operator new(size_t n, std::align_val_t a,
                   const std::nothrow_t&) noexcept {
  return CountedNew(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a,
                     const std::nothrow_t&) noexcept {
  return CountedNew(n, static_cast<size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
