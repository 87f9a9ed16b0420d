#include "runtime/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

namespace attnkit {

int MaxThreads() { return omp_get_max_threads(); }

namespace internal {

void ForEachItemImpl(int64_t n, int threads, ItemFn call, void* ctx) {
  if (n <= 0) return;
  if (threads <= 1 || n <= 1) {
    for (int64_t item = 0; item < n; ++item) call(ctx, item, 0);
    return;
  }
  const int team = static_cast<int>(std::min<int64_t>(threads, n));
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(team)
  {
    const int thread = omp_get_thread_num();
    for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < n;
         item = next.fetch_add(1, std::memory_order_relaxed)) {
      call(ctx, item, thread);
    }
  }
}

}  // namespace internal
}  // namespace attnkit
