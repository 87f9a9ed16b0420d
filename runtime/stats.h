// Summary statistics shared by the tools that time things: the decode report
// (per-step times) and the benchmark tools (repetitions). Medians, not means:
// timings are skewed and heavy-tailed, and one preempted step must not move
// the figure.
#ifndef ATTNKIT_RUNTIME_STATS_H_
#define ATTNKIT_RUNTIME_STATS_H_

#include <span>

namespace attnkit {

// Median (mean of the two middle values for even sizes); NaN when empty.
double Median(std::span<const double> v);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_STATS_H_
