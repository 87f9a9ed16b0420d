// Heap allocation meter of the benchmark binary. alloc_counter.cc replaces the
// global operator new family and, on glibc without sanitizers, interposes
// malloc itself: Eigen, OpenMP and C code allocate through malloc, never
// through operator new, and a decode step that mallocs a scratch matrix must
// show up in allocs_per_step as surely as one that calls new.
//
// Only the benchmark binary links alloc_counter.cc (a library that replaced
// malloc would do so for every program linking it).
#ifndef ATTNKIT_BENCH_ALLOC_COUNTER_H_
#define ATTNKIT_BENCH_ALLOC_COUNTER_H_

#include <cstdint>

namespace attnkit::bench {

struct AllocSnapshot {
  uint64_t allocations = 0;  // successful allocation calls (any thread)
  uint64_t bytes = 0;        // bytes requested by them
};

AllocSnapshot AllocationsSoFar();

// True when malloc/calloc/realloc/aligned allocators are counted too (glibc
// without sanitizers); false when only operator new is.
bool CountsMalloc();

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_ALLOC_COUNTER_H_
