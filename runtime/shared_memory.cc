#include "runtime/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "runtime/accounting.h"

namespace attnkit::shared_memory {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Live segments at once. A check case holds ~10 buffers, a decode report a
// few per layer; past this, buffers fall back to the heap (and are staged).
constexpr size_t kMaxSegments = 4096;
// Freed segments are kept (mapped here and in the workers) for reuse by a
// later buffer of the same size class, up to this many bytes: a campaign
// allocates the same few sizes case after case, and a reused segment costs
// a memset instead of memfd_create + mmap + page faults in both processes.
constexpr size_t kMaxPooledBytes = size_t{256} << 20;

thread_local int t_share_depth = 0;
std::atomic<uint64_t> g_next_id{1};

// Sorted by base: binary search per lookup, memmove per insert/erase, no
// heap allocation ever.
struct Table {
  std::mutex mu;
  std::array<Segment, kMaxSegments> seg{};
  std::array<bool, kMaxSegments> pooled{};  // freed, kept for reuse
  size_t n = 0;
  size_t pooled_bytes = 0;

  // Index of the first segment whose base is > p.
  size_t UpperBound(const void* p) const {
    const auto* b = seg.data();
    return static_cast<size_t>(
        std::upper_bound(
            b, b + n, static_cast<const std::byte*>(p),
            [](const std::byte* q, const Segment& s) { return q < s.base; }) -
        b);
  }
};

Table& GetTable() {
  static Table t;
  return t;
}

size_t PageRound(size_t bytes, size_t page) {
  return (bytes + page - 1) / page * page;
}

// The size class of a request: the next power of two of at least a page,
// so that freed segments fit later requests of similar size.
size_t SizeClass(size_t bytes) {
  size_t c = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  while (c < bytes) c *= 2;
  return c;
}

// A memfd of `size` bytes mapped shared at an address aligned to `align`.
std::optional<Segment> MapNew(size_t bytes, size_t align) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = PageRound(std::max<size_t>(bytes, 1), page);
  const int fd = memfd_create("attnkit-tensor", MFD_CLOEXEC);
  if (fd < 0) return std::nullopt;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return std::nullopt;
  }
  void* addr = nullptr;
  if (align <= page) {
    addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  } else {
    // Reserve size + align of address space, map the file at the aligned
    // address inside it, release the slack on both sides.
    void* r = mmap(nullptr, size + align, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r != MAP_FAILED) {
      const uintptr_t lo = reinterpret_cast<uintptr_t>(r);
      const uintptr_t at = (lo + align - 1) / align * align;
      addr = mmap(reinterpret_cast<void*>(at), size, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_FIXED, fd, 0);
      if (addr == MAP_FAILED) {
        munmap(r, size + align);
      } else {
        if (at > lo) munmap(r, at - lo);
        const uintptr_t end = lo + size + align, used = at + size;
        if (end > used) munmap(reinterpret_cast<void*>(used), end - used);
      }
    } else {
      addr = MAP_FAILED;
    }
  }
  if (addr == MAP_FAILED) {
    close(fd);
    return std::nullopt;
  }
  Segment s;
  s.fd = fd;
  s.base = static_cast<std::byte*>(addr);
  s.size = size;
  return s;
}

}  // namespace

Scope::Scope(bool share) : share_(share) {
  if (share_) ++t_share_depth;
}
Scope::~Scope() {
  if (share_) --t_share_depth;
}
bool Enabled() { return t_share_depth > 0; }

std::optional<Segment> CreateUnregistered(size_t bytes) {
  std::optional<Segment> s = MapNew(bytes, 64);
  if (s) s->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  return s;
}

std::optional<Segment> Allocate(size_t bytes, bool huge) {
  Table& t = GetTable();
  const size_t size = SizeClass(bytes);
  {
    std::lock_guard<std::mutex> lock(t.mu);
    for (size_t i = 0; i < t.n; ++i) {
      if (!t.pooled[i] || t.seg[i].size != size) continue;
      const bool aligned =
          reinterpret_cast<uintptr_t>(t.seg[i].base) % kHugePage == 0;
      if (huge && !aligned) continue;
      t.pooled[i] = false;
      t.pooled_bytes -= size;
      Segment s = t.seg[i];
      std::memset(s.base, 0, bytes);  // the rest is still zero or unused
      accounting::RecordAlloc(static_cast<int64_t>(s.size));
      return s;
    }
    if (t.n == kMaxSegments) return std::nullopt;
  }
  std::optional<Segment> s = MapNew(size, huge ? kHugePage : 64);
  if (!s) return std::nullopt;
  if (huge) madvise(s->base, s->size, MADV_HUGEPAGE);
  s->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (t.n == kMaxSegments) {  // filled meanwhile
      munmap(s->base, s->size);
      close(s->fd);
      return std::nullopt;
    }
    const size_t at = t.UpperBound(s->base);
    std::move_backward(t.seg.begin() + static_cast<ptrdiff_t>(at),
                       t.seg.begin() + static_cast<ptrdiff_t>(t.n),
                       t.seg.begin() + static_cast<ptrdiff_t>(t.n + 1));
    std::move_backward(t.pooled.begin() + static_cast<ptrdiff_t>(at),
                       t.pooled.begin() + static_cast<ptrdiff_t>(t.n),
                       t.pooled.begin() + static_cast<ptrdiff_t>(t.n + 1));
    t.seg[at] = *s;
    t.pooled[at] = false;
    ++t.n;
  }
  accounting::RecordAlloc(static_cast<int64_t>(s->size));
  return s;
}

void Free(void* base) {
  Table& t = GetTable();
  Segment s;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    const size_t i = t.UpperBound(base);
    if (i == 0 || t.seg[i - 1].base != base || t.pooled[i - 1]) return;
    s = t.seg[i - 1];
    accounting::RecordFree(static_cast<int64_t>(s.size));
    if (t.pooled_bytes + s.size <= kMaxPooledBytes) {
      t.pooled[i - 1] = true;  // kept mapped, here and in the workers
      t.pooled_bytes += s.size;
      return;
    }
    std::move(t.seg.begin() + static_cast<ptrdiff_t>(i),
              t.seg.begin() + static_cast<ptrdiff_t>(t.n),
              t.seg.begin() + static_cast<ptrdiff_t>(i - 1));
    std::move(t.pooled.begin() + static_cast<ptrdiff_t>(i),
              t.pooled.begin() + static_cast<ptrdiff_t>(t.n),
              t.pooled.begin() + static_cast<ptrdiff_t>(i - 1));
    --t.n;
  }
  munmap(s.base, s.size);
  close(s.fd);
}

std::optional<Segment> Find(const void* p, size_t bytes) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  const size_t i = t.UpperBound(p);
  if (i == 0) return std::nullopt;
  if (t.pooled[i - 1]) return std::nullopt;  // freed: no tensor lives here
  const Segment& s = t.seg[i - 1];
  const auto* q = static_cast<const std::byte*>(p);
  if (q < s.base || static_cast<size_t>(q - s.base) > s.size ||
      bytes > s.size - static_cast<size_t>(q - s.base)) {
    return std::nullopt;
  }
  return s;
}

bool IsLive(uint64_t id) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  // A pooled segment stays mapped in the workers: it is reused as is.
  for (size_t i = 0; i < t.n; ++i) {
    if (t.seg[i].id == id) return true;
  }
  return false;
}

}  // namespace attnkit::shared_memory
