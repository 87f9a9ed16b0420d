// Memory another process can map: while a Scope(true) is alive on a thread,
// every AlignedBuffer (tensor.h) that thread allocates is a segment of its
// own -- a memfd mapped MAP_SHARED -- so a backend running in a worker process
// (backends/remote.h) reads and writes the caller's tensors where they lie,
// with no copy per call: the caller passes the segment's file descriptor
// once, then (segment, offset) per tensor.
//
// The segment table is a fixed array (no heap allocation per buffer, so the
// allocation meters count a shared buffer exactly as a heap one); when it is
// full, or the kernel refuses a memfd, the buffer falls back to the heap and
// callers stage it through a segment of their own (correct, one copy).
#ifndef ATTNKIT_RUNTIME_SHARED_MEMORY_H_
#define ATTNKIT_RUNTIME_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <optional>

namespace attnkit::shared_memory {

// Code that allocates tensors for a backend in a worker (the tester's case
// data, a decode session's cache and inputs) holds a Scope(true) around the
// allocations -- and only there: shared pages cost more to fault in than
// heap ones, and the heap's state is part of what the naive decode path
// measures, so nothing else moves. Scopes nest (per thread).
class Scope {
 public:
  explicit Scope(bool share);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool share_;
};
// Whether this thread's AlignedBuffers are shared segments now.
bool Enabled();

struct Segment {
  uint64_t id = 0;  // unique in this process, never reused; 0 = none
  int fd = -1;      // the memfd (close-on-exec); owned by the table
  std::byte* base = nullptr;
  size_t size = 0;  // mapped bytes (a multiple of the page size)
};

// A zero-filled segment of at least `bytes` (a power of two of pages; huge:
// 2 MiB aligned and advised MADV_HUGEPAGE), reused or new, or nullopt when none
// can be made (table full, memfd refused). Reported to accounting::RecordAlloc.
std::optional<Segment> Allocate(size_t bytes, bool huge);
// Releases a segment returned by Allocate (by its base): kept mapped for
// reuse by a later Allocate of its size class (up to 256 MiB of them; a
// worker keeps its mapping too), else unmapped and closed.
void Free(void* base);

// The live segment holding [p, p + bytes), if any.
std::optional<Segment> Find(const void* p, size_t bytes);
bool IsLive(uint64_t id);

// Creates a shared mapping without registering it (a worker's or a stager's
// own scratch): the memfd and its mapping, or nullopt.
std::optional<Segment> CreateUnregistered(size_t bytes);

}  // namespace attnkit::shared_memory

#endif  // ATTNKIT_RUNTIME_SHARED_MEMORY_H_
