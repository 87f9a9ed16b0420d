// The one way the backends spread work items over OpenMP threads.
//
// Why not `#pragma omp parallel for schedule(dynamic)`: every binary that
// links MLIR carries /usr/lib/llvm-22/lib in its RUNPATH, so the process's
// libgomp.so.1 is LLVM's libomp answering under that name. libomp mallocs a
// dispatch buffer at the start of every dynamic loop, and a team even for a
// serialized `parallel if(false)` region -- allocations on every decode step,
// which must allocate nothing. ForEachItem therefore hands items out through
// one atomic counter inside a plain `parallel` region (a warm hot team
// allocates nothing) and opens no region at all when it runs serially.
// First come, first served also balances items of unequal cost when callers
// order them costliest first (causal query blocks).
#ifndef ATTNKIT_RUNTIME_PARALLEL_H_
#define ATTNKIT_RUNTIME_PARALLEL_H_

#include <cstdint>
#include <type_traits>
#include <utility>

namespace attnkit {

// omp_get_max_threads(): the team size ForEachItem callers size their
// per-thread scratch for by default.
int MaxThreads();

namespace internal {
using ItemFn = void (*)(void* ctx, int64_t item, int thread);
void ForEachItemImpl(int64_t n, int threads, ItemFn call, void* ctx);
}  // namespace internal

// Calls fn(item, thread) once for every item in [0, n), on up to `threads`
// threads (never more than n). `thread` is in [0, min(threads, n)) and no two
// concurrent calls share one, so it indexes per-thread scratch. With
// threads <= 1 or n <= 1 every call runs on the calling thread with
// thread 0, without entering OpenMP. Items are taken in increasing order;
// which thread runs which item is unspecified. Allocates nothing once warm:
// the first parallel call with a team size creates that team, later ones
// reuse it. fn must not throw.
template <typename Fn>
void ForEachItem(int64_t n, int threads, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  internal::ForEachItemImpl(
      n, threads,
      [](void* ctx, int64_t item, int thread) {
        (*static_cast<F*>(ctx))(item, thread);
      },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_PARALLEL_H_
