// Counting allocation hooks, linked only into binaries that measure (the
// attnkit_alloc_hooks object library): interposes global operator new/delete
// in all their forms and the malloc family, forwarding to glibc's allocator
// (__libc_*), and reports each call to runtime/accounting.h.
//
// Why __libc_* and not dlsym(RTLD_NEXT): dlsym itself allocates (calloc for
// its error state), which would recurse into the hook before it is resolved;
// glibc exports its allocator under these names precisely so that a
// replacement malloc can wrap it ("Replacing malloc", glibc manual 3.2.5).
//
// operator new calls __libc_malloc directly, not malloc, so one `new` is one
// counted allocation rather than two.
//
// Under AddressSanitizer, ASan owns malloc and operator new (interposing them
// again would bypass its checks); there we register the sanitizer's own
// allocation hooks, which see every allocation ASan serves.
#include <malloc.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "runtime/accounting.h"

#if defined(__SANITIZE_ADDRESS__)
#define ATTNKIT_HOOKS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNKIT_HOOKS_ASAN 1
#endif
#endif

#if ATTNKIT_HOOKS_ASAN

// From <sanitizer/allocator_interface.h>, which GCC 12 does not ship (its
// libasan exports both functions).
extern "C" {
int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void*, size_t),
    void (*free_hook)(const volatile void*));
size_t __sanitizer_get_allocated_size(const volatile void* p);
}

namespace {

void AsanMallocHook(const volatile void* ptr, size_t size) {
  attnkit::accounting::internal::OnAlloc(static_cast<int64_t>(size),
                                         static_cast<int64_t>(size));
}

void AsanFreeHook(const volatile void* ptr) {
  if (ptr == nullptr || !attnkit::accounting::internal::Active()) return;
  attnkit::accounting::internal::OnFree(
      static_cast<int64_t>(__sanitizer_get_allocated_size(ptr)));
}

struct InstallHooks {
  InstallHooks() {
    attnkit::accounting::internal::SetAllocHooksInstalled(
        __sanitizer_install_malloc_and_free_hooks(&AsanMallocHook,
                                                  &AsanFreeHook) != 0);
  }
};
const InstallHooks install_hooks;

}  // namespace

#else  // !ATTNKIT_HOOKS_ASAN

extern "C" {
void* __libc_malloc(size_t size);
void __libc_free(void* ptr);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void* __libc_valloc(size_t size);
void* __libc_pvalloc(size_t size);
}

namespace {

using attnkit::accounting::internal::Active;
using attnkit::accounting::internal::OnAlloc;
using attnkit::accounting::internal::OnFree;

inline void* Counted(void* p, size_t requested) {
  if (p != nullptr && Active()) {
    OnAlloc(static_cast<int64_t>(requested),
            static_cast<int64_t>(malloc_usable_size(p)));
  }
  return p;
}

inline void CountedFree(void* p) {
  if (p == nullptr) return;
  if (Active()) OnFree(static_cast<int64_t>(malloc_usable_size(p)));
  __libc_free(p);
}

bool ValidAlignment(size_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0;
}

// operator new's contract: retry through the new_handler, then throw.
void* NewImpl(size_t size, size_t alignment, bool nothrow) {
  if (size == 0) size = 1;
  while (true) {
    void* p = alignment <= alignof(std::max_align_t)
                  ? __libc_malloc(size)
                  : __libc_memalign(alignment, size);
    if (p != nullptr) return Counted(p, size);
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    if (nothrow) {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    } else {
      handler();
    }
  }
}

struct MarkInstalled {
  MarkInstalled() {
    attnkit::accounting::internal::SetAllocHooksInstalled(true);
  }
};
const MarkInstalled mark_installed;

}  // namespace

extern "C" {

void* malloc(size_t size) noexcept {
  return Counted(__libc_malloc(size), size);
}

void free(void* ptr) noexcept { CountedFree(ptr); }

void* calloc(size_t n, size_t size) noexcept {
  return Counted(__libc_calloc(n, size), n * size);
}

// A realloc is an allocation of the new size plus a release of the old block
// (glibc may extend in place, but the caller cannot rely on it, and the
// frameworks' growth pattern is exactly what the meter must show).
void* realloc(void* ptr, size_t size) noexcept {
  const size_t old = ptr != nullptr ? malloc_usable_size(ptr) : 0;
  void* p = __libc_realloc(ptr, size);
  if (!Active()) return p;
  if (ptr != nullptr && (p != nullptr || size == 0)) {
    OnFree(static_cast<int64_t>(old));
  }
  return Counted(p, size);
}

void* aligned_alloc(size_t alignment, size_t size) noexcept {
  if (!ValidAlignment(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return Counted(__libc_memalign(alignment, size), size);
}

void* memalign(size_t alignment, size_t size) noexcept {
  return Counted(__libc_memalign(alignment, size), size);
}

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (!ValidAlignment(alignment) || alignment % sizeof(void*) != 0) {
    return EINVAL;
  }
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = Counted(p, size);
  return 0;
}

void* valloc(size_t size) noexcept {
  return Counted(__libc_valloc(size), size);
}

void* pvalloc(size_t size) noexcept {
  return Counted(__libc_pvalloc(size), size);
}

}  // extern "C"

// Every replaceable global allocation function ([new.delete]).
void* operator new(size_t n) { return NewImpl(n, 0, false); }
void* operator new[](size_t n) { return NewImpl(n, 0, false); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return NewImpl(n, 0, true);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return NewImpl(n, 0, true);
}
void* operator new(size_t n, std::align_val_t a) {
  return NewImpl(n, static_cast<size_t>(a), false);
}
void* operator new[](size_t n, std::align_val_t a) {
  return NewImpl(n, static_cast<size_t>(a), false);
}
void* operator new(size_t n, std::align_val_t a,
                   const std::nothrow_t&) noexcept {
  return NewImpl(n, static_cast<size_t>(a), true);
}
void* operator new[](size_t n, std::align_val_t a,
                     const std::nothrow_t&) noexcept {
  return NewImpl(n, static_cast<size_t>(a), true);
}

void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept {
  CountedFree(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  CountedFree(p);
}
void operator delete(void* p, size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { CountedFree(p); }
void operator delete(void* p, std::align_val_t) noexcept { CountedFree(p); }
void operator delete[](void* p, std::align_val_t) noexcept { CountedFree(p); }
void operator delete(void* p, std::align_val_t,
                     const std::nothrow_t&) noexcept {
  CountedFree(p);
}
void operator delete[](void* p, std::align_val_t,
                       const std::nothrow_t&) noexcept {
  CountedFree(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  CountedFree(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  CountedFree(p);
}

#endif  // ATTNKIT_HOOKS_ASAN
